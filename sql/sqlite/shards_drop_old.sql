-- Upgrade, step 3 of 3 (see shards_add_states.sql): the old shards table, its rows copied.
DROP TABLE shardwise_shards_before_states
