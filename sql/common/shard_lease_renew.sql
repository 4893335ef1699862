-- A worker renews the lease of the shard attempt it is scoring; only that attempt's owner may.
-- Nothing changes once a newer attempt took the shard (another worker, after this one seemed dead).
UPDATE shardwise_shards
SET lease_expires_at = :lease_expires_at
WHERE run_id = :run_id AND shard_id = :shard_id AND attempts = :attempt AND owner = :owner
