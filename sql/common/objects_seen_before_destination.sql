-- objects_seen.sql on a ledger made before shardwise_objects had its destination column (a dry run or
-- a watcher reads a ledger without upgrading it): a pair belongs to the results of the run that
-- recorded it, as the upgrade (objects_add_destination.sql) files it.
SELECT o.object_key, o.etag FROM shardwise_objects o
JOIN shardwise_runs r ON r.run_id = o.run_id
WHERE o.source_identity = :source_identity AND r.results_table = :destination
