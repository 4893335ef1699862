DROP TABLE IF EXISTS shardwise_dead_stage
