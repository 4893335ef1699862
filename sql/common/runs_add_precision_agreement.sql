-- Upgrade: a ledger made before runs recorded the precision guard's agreement.
ALTER TABLE shardwise_runs ADD COLUMN precision_agreement {DOUBLE}
