-- The first statement of every change of a shard's status (shard_states.py): the row locked for
-- the transaction (on SQLite, BEGIN IMMEDIATE holds the write lock already), its status, the
-- attempts counted so far, and the worker whose attempt is the current one.
SELECT status, attempts, owner FROM shardwise_shards
WHERE run_id = :run_id AND shard_id = :shard_id
{FOR_UPDATE}
