-- The schema of the function behind a table's two enabled shardwise_watch_* triggers
-- (it holds shardwise_watch_changes); no row unless both are installed.
SELECT min(fn.nspname) AS watch_schema
FROM pg_catalog.pg_trigger t
JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
JOIN pg_catalog.pg_namespace fn ON fn.oid = p.pronamespace
WHERE t.tgname IN ('shardwise_watch_insert', 'shardwise_watch_update')
  AND NOT t.tgisinternal AND t.tgenabled <> 'D'
  AND n.nspname = :schema AND c.relname = :table
HAVING count(*) = 2
