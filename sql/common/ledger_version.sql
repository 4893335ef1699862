-- The ledger's schema version (see ledger_schema.sql): one row, or none in a ledger whose creation
-- never recorded it.
SELECT version FROM shardwise_schema
