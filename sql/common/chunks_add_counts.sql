-- Upgrade: a ledger made before chunk marks held the sums of count outputs (a generator's tokens).
ALTER TABLE shardwise_chunks ADD COLUMN counts {JSON}
