-- The schema version of a new ledger, written in the transaction that creates its tables; a ledger
-- that has its row keeps it (two processes creating the ledger at once both succeed).
INSERT INTO shardwise_schema (id, version) VALUES (1, :version)
ON CONFLICT (id) DO NOTHING
