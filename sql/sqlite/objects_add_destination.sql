-- Upgrade, step 1 of 2: SQLite cannot change a primary key, so a ledger made before seen objects
-- were keyed by destination moves its objects table aside; ledger_schema.sql then creates the
-- current one, and objects_copy_destination.sql copies the rows over and drops the old table.
ALTER TABLE shardwise_objects RENAME TO shardwise_objects_before_destination
