-- The chunk's done-mark, in the transaction that merges the chunk (see shardwise_chunks in ledger_schema.sql).
INSERT INTO shardwise_chunks (
    run_id, shard_id, chunk, attempt, rows_in, rows_out, rows_failed, rows_truncated,
    rows_inserted, rows_updated, rows_unchanged, position, committed_at, counts
)
VALUES (
    :run_id, :shard_id, :chunk, :attempt, :rows_in, :rows_out, :rows_failed, :rows_truncated,
    :rows_inserted, :rows_updated, :rows_unchanged, :position, :committed_at, :counts
)
