-- Upgrade: a ledger made before shard states (running, retrying) gets the wider CHECK. Widening
-- it rejects no stored row.
ALTER TABLE shardwise_shards DROP CONSTRAINT IF EXISTS shardwise_shards_status_check;
ALTER TABLE shardwise_shards ADD CONSTRAINT shardwise_shards_status_check
    CHECK (status IN ('pending', 'running', 'retrying', 'done', 'failed'))
