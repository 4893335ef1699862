-- The leases of the runs runs_recent.sql lists (same filter and order), and how many of each
-- run's shards a worker holds now: a ledger made before leases has none of these columns.
SELECT r.run_id, r.owner, r.lease_expires_at,
       (SELECT COUNT(*) FROM shardwise_shards s
        WHERE s.run_id = r.run_id AND s.status = 'running'
          AND {INSTANT}(s.lease_expires_at) > {INSTANT}(:now)) AS shards_running
FROM shardwise_runs r
WHERE (CAST(:status AS text) IS NULL OR r.status = CAST(:status AS text))
  AND (CAST(:results_table AS text) IS NULL OR r.results_table = CAST(:results_table AS text))
ORDER BY r.started_at DESC, r.run_id DESC
LIMIT :limit
