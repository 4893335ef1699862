-- Lock the run's row for this transaction (on SQLite, BEGIN IMMEDIATE already holds the write lock).
SELECT model_version, results_table, plan
FROM shardwise_runs
WHERE run_id = :run_id
{FOR_UPDATE}
