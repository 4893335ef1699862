INSERT INTO shardwise_watch_state (name, state, updated_at)
VALUES (:name, CAST(:state AS jsonb), now())
ON CONFLICT (name) DO UPDATE SET state = EXCLUDED.state, updated_at = EXCLUDED.updated_at
