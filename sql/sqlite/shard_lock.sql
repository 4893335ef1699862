-- Taken first in a shard's merge transaction. The transaction began with
-- BEGIN IMMEDIATE, which already holds SQLite's single write lock, so a second
-- writer of the same shard waits for it, then sees status 'done' and backs off.
SELECT status FROM shardwise_shards
WHERE run_id = :run_id AND shard_id = :shard_id
