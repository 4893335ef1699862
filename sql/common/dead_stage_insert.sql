INSERT INTO shardwise_dead_stage (seq, source_key, error_class, message, input_fingerprint)
VALUES (:seq, :source_key, :error_class, :message, :input_fingerprint)
