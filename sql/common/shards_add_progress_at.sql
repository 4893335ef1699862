-- Upgrade: a ledger made before running shards reported when they last made progress.
ALTER TABLE shardwise_shards ADD COLUMN progress_at {TIMESTAMP}
