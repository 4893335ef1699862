-- Upgrade: a ledger made before runs recorded where the precision guard's agreement came from.
ALTER TABLE shardwise_runs ADD COLUMN precision_agreement_from text
