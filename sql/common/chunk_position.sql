-- Run under the shard's lock, before a chunk is merged: a row here means it is merged already.
SELECT position
FROM shardwise_chunks
WHERE run_id = :run_id AND shard_id = :shard_id AND chunk = :chunk
