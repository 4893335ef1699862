-- Per run, the rows of the committed chunks of its shards that are not done (running, failed or
-- abandoned): merged into the results table already, but in no shard's done counts yet. Live
-- counts add them to the done shards' totals, as run_finish.sql does. :run_id NULL: every run.
SELECT c.run_id,
       COALESCE(SUM(c.rows_in), 0) AS rows_in,
       COALESCE(SUM(c.rows_out), 0) AS rows_out,
       COALESCE(SUM(c.rows_failed), 0) AS rows_failed
FROM shardwise_chunks c
JOIN shardwise_shards s ON s.run_id = c.run_id AND s.shard_id = c.shard_id
WHERE s.status <> 'done' AND (CAST(:run_id AS text) IS NULL OR c.run_id = CAST(:run_id AS text))
GROUP BY c.run_id
