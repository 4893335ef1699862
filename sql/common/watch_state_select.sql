SELECT CAST(state AS text) AS state FROM shardwise_watch_state WHERE name = :name
