-- The DDL SQLite stores for shardwise_shards: a ledger made before shard states has a CHECK that
-- allows only pending, done and failed (ledger_sql.create_ledger upgrades it).
SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'shardwise_shards'
