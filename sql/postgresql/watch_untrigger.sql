-- Remove the change triggers of one source table; {table} is composed with psycopg.sql.
-- The counter row and the shared function stay: other tables may use the function,
-- and reinstalled triggers continue the counter's sequence.
DROP TRIGGER IF EXISTS shardwise_watch_insert ON {table};
DROP TRIGGER IF EXISTS shardwise_watch_update ON {table}
