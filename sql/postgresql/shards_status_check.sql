-- The CHECK on shardwise_shards.status as the server holds it; a ledger made before shard states
-- allows only pending, done and failed (ledger_sql.create_ledger upgrades it).
SELECT pg_get_constraintdef(c.oid)
FROM pg_constraint c
WHERE c.conrelid = 'shardwise_shards'::regclass AND c.contype = 'c'
  AND c.conname = 'shardwise_shards_status_check'
