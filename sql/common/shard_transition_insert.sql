INSERT INTO shardwise_shard_transitions
    (run_id, shard_id, attempt, from_status, to_status, at, worker, error)
VALUES (:run_id, :shard_id, :attempt, :from_status, :to_status, :at, :worker, :error)
