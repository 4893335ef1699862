-- A try failed and another is coming: the shard waits, with the try's error (shard_states.py
-- checked the transition and locked the row).
UPDATE shardwise_shards
SET status = 'retrying',
    last_error = :error
WHERE run_id = :run_id AND shard_id = :shard_id
