-- Taken first in a shard's merge transaction: a second writer of the same shard
-- waits here (on SQLite, for the write lock its BEGIN IMMEDIATE takes), then sees
-- status 'done' and backs off.
SELECT status FROM shardwise_shards
WHERE run_id = :run_id AND shard_id = :shard_id
{FOR_UPDATE}
