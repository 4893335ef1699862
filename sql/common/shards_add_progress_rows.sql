-- Upgrade: a ledger made before running shards reported their progress.
ALTER TABLE shardwise_shards ADD COLUMN progress_rows bigint
