INSERT INTO shardwise_watch_state (name, state, updated_at)
VALUES (:name, :state, CURRENT_TIMESTAMP)
ON CONFLICT (name) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at
