-- Upgrade: a ledger made before runs held a lease (NULL: never leased, so never refused).
ALTER TABLE shardwise_runs ADD COLUMN lease_expires_at {TIMESTAMP}
