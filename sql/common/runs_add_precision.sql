-- Upgrade: a ledger made before runs recorded their precision (NULL there means fp32).
ALTER TABLE shardwise_runs ADD COLUMN precision text
