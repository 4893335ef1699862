-- Upgrade, step 2 of 2 (see objects_add_destination.sql): each stored pair filed under the results
-- of the run that recorded it (that run scored the object into exactly those); a pair whose run is
-- gone belongs to no destination ('') and is scored again once.
INSERT INTO shardwise_objects (source_identity, destination, object_key, etag, run_id, seen_at)
SELECT o.source_identity, coalesce(r.results_table, ''), o.object_key, o.etag, o.run_id, o.seen_at
FROM shardwise_objects_before_destination o
LEFT JOIN shardwise_runs r ON r.run_id = o.run_id;
DROP TABLE shardwise_objects_before_destination
