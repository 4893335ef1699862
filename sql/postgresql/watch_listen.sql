-- The channel the change trigger notifies (see watch_trigger.sql).
LISTEN shardwise_data
