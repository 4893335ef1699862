-- A run's failed shards, locked: a resume returns each to pending (shard_states.reset_failed).
SELECT shard_id, attempts FROM shardwise_shards
WHERE run_id = :run_id AND status = 'failed'
ORDER BY shard_id
{FOR_UPDATE}
