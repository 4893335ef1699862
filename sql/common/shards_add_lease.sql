-- Upgrade: a ledger made before shard attempts held a lease.
ALTER TABLE shardwise_shards ADD COLUMN lease_expires_at {TIMESTAMP}
