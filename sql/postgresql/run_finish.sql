-- Counts come from the shard ledger, which is the record of what was merged;
-- rows of failed shards are not known and are not counted.
UPDATE shardwise_runs
SET status = :status,
    finished_at = CAST(:finished_at AS timestamptz),
    rows_in = (SELECT COALESCE(SUM(rows_in), 0) FROM shardwise_shards s
               WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done'),
    rows_out = (SELECT COALESCE(SUM(rows_out), 0) FROM shardwise_shards s
                WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done'),
    rows_failed = (SELECT COALESCE(SUM(rows_failed), 0) FROM shardwise_shards s
                   WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done'),
    shards_done = (SELECT COUNT(*) FROM shardwise_shards s
                   WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done'),
    shards_failed = (SELECT COUNT(*) FROM shardwise_shards s
                     WHERE s.run_id = shardwise_runs.run_id AND s.status = 'failed')
WHERE run_id = :run_id
