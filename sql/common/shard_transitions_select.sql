-- One run's shard transitions in the order they happened (:shard_id NULL: every shard).
SELECT run_id, shard_id, attempt, from_status, to_status, at, worker, error
FROM shardwise_shard_transitions
WHERE run_id = :run_id AND (CAST(:shard_id AS integer) IS NULL OR shard_id = CAST(:shard_id AS integer))
ORDER BY id
