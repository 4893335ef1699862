-- Upgrade: a ledger made before shard attempts recorded their worker (host:pid/thread).
ALTER TABLE shardwise_shards ADD COLUMN owner text
