-- The leases of a run's shard attempts still under way: a worker may still write for the run while
-- one of them is live (see shardwise/results/leases.py).
SELECT owner, lease_expires_at
FROM shardwise_shards
WHERE run_id = :run_id
  AND status IN ('running', 'retrying')
  AND owner IS NOT NULL
  AND {INSTANT}(lease_expires_at) > {INSTANT}(:now)
