-- Count an attempt as it starts; the ledger, not the caller, numbers attempts,
-- so a task that a cluster re-runs after a worker died still counts as a new one.
-- The attempt's live progress starts again from zero.
-- The worker (owner) takes the attempt's lease; it renews it while scoring (shard_lease_renew.sql).
-- The shard is now running (shard_states.py checked the transition and locked the row).
UPDATE shardwise_shards
SET status = 'running',
    attempts = attempts + 1,
    started_at = :started_at,
    host = COALESCE(CAST(:host AS text), host),
    device = COALESCE(CAST(:device AS text), device),
    progress_rows = 0,
    progress_failed = 0,
    progress_counts = NULL,
    progress_at = NULL,
    owner = CAST(:owner AS text),
    lease_expires_at = :lease_expires_at
WHERE run_id = :run_id AND shard_id = :shard_id AND status <> 'done'
RETURNING attempts
