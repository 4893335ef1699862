-- Upgrade: a ledger made before shards reported the sums of count outputs (a generator's tokens).
ALTER TABLE shardwise_shards ADD COLUMN progress_counts {JSON}
