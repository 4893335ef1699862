-- How far a running attempt has got: rows through the engine, dead letters and count outputs so far.
-- Only the current attempt of a shard not yet done may write. The caller waits only
-- briefly for SQLite's write lock (busy_brief.sql), so a busy database skips the report.
UPDATE shardwise_shards
SET progress_rows = :rows,
    progress_failed = :failed,
    progress_counts = :counts,
    progress_at = :progress_at
WHERE run_id = :run_id AND shard_id = :shard_id AND attempts = :attempt AND status <> 'done'
