-- Counts come from the shard ledger, which is the record of what was merged: a done
-- shard's counts, plus the committed chunks of a shard that is not done (its rows are
-- in the results table already; a resume adds the rest when it marks the shard done).
-- Finishing releases the run's lease. Only its owner finishes it (:owner NULL: any caller), so a
-- process whose run was taken over (resume --force) cannot close the new owner's run.
UPDATE shardwise_runs
SET status = :status,
    finished_at = :finished_at,
    lease_expires_at = :finished_at,
    rows_in = (SELECT COALESCE(SUM(rows_in), 0) FROM shardwise_shards s
               WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done')
              + (SELECT COALESCE(SUM(c.rows_in), 0) FROM shardwise_chunks c
                 JOIN shardwise_shards s ON s.run_id = c.run_id AND s.shard_id = c.shard_id
                 WHERE c.run_id = shardwise_runs.run_id AND s.status <> 'done'),
    rows_out = (SELECT COALESCE(SUM(rows_out), 0) FROM shardwise_shards s
                WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done')
               + (SELECT COALESCE(SUM(c.rows_out), 0) FROM shardwise_chunks c
                  JOIN shardwise_shards s ON s.run_id = c.run_id AND s.shard_id = c.shard_id
                  WHERE c.run_id = shardwise_runs.run_id AND s.status <> 'done'),
    rows_failed = (SELECT COALESCE(SUM(rows_failed), 0) FROM shardwise_shards s
                   WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done')
                  + (SELECT COALESCE(SUM(c.rows_failed), 0) FROM shardwise_chunks c
                     JOIN shardwise_shards s ON s.run_id = c.run_id AND s.shard_id = c.shard_id
                     WHERE c.run_id = shardwise_runs.run_id AND s.status <> 'done'),
    shards_done = (SELECT COUNT(*) FROM shardwise_shards s
                   WHERE s.run_id = shardwise_runs.run_id AND s.status = 'done'),
    shards_failed = (SELECT COUNT(*) FROM shardwise_shards s
                     WHERE s.run_id = shardwise_runs.run_id AND s.status = 'failed')
WHERE run_id = :run_id
  AND (CAST(:owner AS text) IS NULL OR owner IS NULL OR owner = CAST(:owner AS text))
