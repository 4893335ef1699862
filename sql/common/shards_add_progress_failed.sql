-- Upgrade: a ledger made before running shards reported their dead letters so far.
ALTER TABLE shardwise_shards ADD COLUMN progress_failed bigint
