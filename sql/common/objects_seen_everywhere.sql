-- The (object key, ETag) pairs of :source_identity scored into every destination that ever read it:
-- what a watcher, which does not know where the runs it starts write, need not announce again.
SELECT object_key, etag FROM shardwise_objects
WHERE source_identity = :source_identity
GROUP BY object_key, etag
HAVING count(DISTINCT destination) = (
    SELECT count(DISTINCT destination) FROM shardwise_objects
    WHERE source_identity = :source_identity
)
