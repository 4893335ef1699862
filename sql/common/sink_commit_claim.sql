-- First statement of a chunk's merge transaction: no row back means the chunk was merged already
-- (or is being merged by a racing writer, whose commit this waits for on PostgreSQL).
INSERT INTO shardwise_commits (
    results_table, run_id, shard_id, chunk, position, rows_inserted, rows_updated, rows_unchanged,
    committed_at
)
VALUES (:results_table, :run_id, :shard_id, :chunk, :position, 0, 0, 0, :committed_at)
ON CONFLICT (run_id, shard_id, chunk) DO NOTHING
RETURNING chunk
