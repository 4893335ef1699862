-- Upgrade: a ledger made before runs recorded who holds them (host:pid/thread of the flow's process).
ALTER TABLE shardwise_runs ADD COLUMN owner text
