-- Upgrade, step 1 of 3: SQLite cannot change a CHECK, so a ledger made before shard states
-- moves its shards table aside; ledger_schema.sql then creates the current one, the rows are
-- copied over (ledger_sql.py) and shards_drop_old.sql drops the old table. legacy_alter_table
-- keeps shardwise_chunks' foreign key naming shardwise_shards, the new table, not the old one.
PRAGMA legacy_alter_table = ON;
ALTER TABLE shardwise_shards RENAME TO shardwise_shards_before_states;
PRAGMA legacy_alter_table = OFF
