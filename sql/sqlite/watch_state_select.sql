SELECT state FROM shardwise_watch_state WHERE name = :name
