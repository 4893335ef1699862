-- A running run's counts, summed from its done shards now: shardwise_runs' own counters are
-- written only when the run finishes (run_finish.sql). The committed chunks of its other shards
-- are added from chunks_pending.sql.
SELECT COALESCE(SUM(CASE WHEN status = 'done' THEN rows_in END), 0) AS rows_in,
       COALESCE(SUM(CASE WHEN status = 'done' THEN rows_out END), 0) AS rows_out,
       COALESCE(SUM(CASE WHEN status = 'done' THEN rows_failed END), 0) AS rows_failed,
       COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0) AS shards_done,
       COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0) AS shards_failed
FROM shardwise_shards
WHERE run_id = :run_id
