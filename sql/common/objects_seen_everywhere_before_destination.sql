-- objects_seen_everywhere.sql on a ledger made before shardwise_objects had its destination column:
-- each pair's destination is the results of the run that recorded it.
SELECT o.object_key, o.etag FROM shardwise_objects o
JOIN shardwise_runs r ON r.run_id = o.run_id
WHERE o.source_identity = :source_identity
GROUP BY o.object_key, o.etag
HAVING count(DISTINCT r.results_table) = (
    SELECT count(DISTINCT r2.results_table) FROM shardwise_objects o2
    JOIN shardwise_runs r2 ON r2.run_id = o2.run_id
    WHERE o2.source_identity = :source_identity
)
