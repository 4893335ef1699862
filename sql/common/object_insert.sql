INSERT INTO shardwise_objects (source_identity, destination, object_key, etag, run_id, seen_at)
VALUES (:source_identity, :destination, :object_key, :etag, :run_id, :seen_at)
ON CONFLICT (source_identity, destination, object_key, etag) DO NOTHING
