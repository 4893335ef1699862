-- The latest runs of a ledger, newest first, optionally only those with :status and writing
-- :results_table (NULL: any), with counts summed live from their done shards (shardwise_runs' own
-- counters are written only when a run finishes; the committed chunks of shards not done are added
-- from chunks_pending.sql), the budget their last invocation ended under, their leases, and how many of each run's shards a worker holds now.
SELECT r.run_id, r.status, r.started_by, r.started_at, r.finished_at, r.model_name, r.results_table,
       r.shards_total, r.owner, r.lease_expires_at, b.budget_usd, b.budget_tokens,
       (SELECT COUNT(*) FROM shardwise_shards s
        WHERE s.run_id = r.run_id AND s.status = 'done') AS shards_done,
       (SELECT COUNT(*) FROM shardwise_shards s
        WHERE s.run_id = r.run_id AND s.status = 'failed') AS shards_failed,
       (SELECT COALESCE(SUM(s.rows_in), 0) FROM shardwise_shards s
        WHERE s.run_id = r.run_id AND s.status = 'done') AS rows_in,
       (SELECT COALESCE(SUM(s.rows_out), 0) FROM shardwise_shards s
        WHERE s.run_id = r.run_id AND s.status = 'done') AS rows_out,
       (SELECT COALESCE(SUM(s.rows_failed), 0) FROM shardwise_shards s
        WHERE s.run_id = r.run_id AND s.status = 'done') AS rows_failed,
       (SELECT COUNT(*) FROM shardwise_shards s
        WHERE s.run_id = r.run_id AND s.status = 'running'
          AND {INSTANT}(s.lease_expires_at) > {INSTANT}(:now)) AS shards_running
FROM shardwise_runs r
LEFT JOIN shardwise_run_budgets b ON b.run_id = r.run_id
WHERE (CAST(:status AS text) IS NULL OR r.status = CAST(:status AS text))
  AND (CAST(:results_table AS text) IS NULL OR r.results_table = CAST(:results_table AS text))
ORDER BY r.started_at DESC, r.run_id DESC
LIMIT :limit
