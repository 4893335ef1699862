-- A run's row, every column: a run's summary reads them all.
SELECT *
FROM shardwise_runs
WHERE run_id = :run_id
