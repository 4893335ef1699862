-- Where a retried or resumed attempt at a shard starts: after its last committed chunk.
SELECT chunk, position
FROM shardwise_chunks
WHERE run_id = :run_id AND shard_id = :shard_id
ORDER BY chunk DESC
LIMIT 1
