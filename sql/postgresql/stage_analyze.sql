-- Autovacuum never analyses temporary tables; without statistics the planner
-- may hash the whole results table to count which staged keys already exist.
-- Only the key column: statistics on real[] vectors cost seconds and help no plan.
ANALYZE shardwise_stage (source_key)
