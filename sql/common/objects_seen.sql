SELECT object_key, etag FROM shardwise_objects WHERE source_identity = :source_identity
