-- The (object key, ETag) pairs completed runs scored from :source_identity into :destination (the
-- run's results as shardwise_runs.results_table records them): only-new skips these objects.
SELECT object_key, etag FROM shardwise_objects
WHERE source_identity = :source_identity AND destination = :destination
