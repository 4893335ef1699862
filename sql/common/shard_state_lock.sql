-- The first statement of every change of a shard's status (shard_states.py): the row locked for
-- the transaction (on SQLite, BEGIN IMMEDIATE holds the write lock already), its status and the
-- attempts counted so far.
SELECT status, attempts FROM shardwise_shards
WHERE run_id = :run_id AND shard_id = :shard_id
{FOR_UPDATE}
