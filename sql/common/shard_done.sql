UPDATE shardwise_shards
SET status = 'done',
    attempts = {GREATEST}(attempts, CAST(:attempt AS integer)),
    rows_in = :rows_in, rows_out = :rows_out, rows_failed = :rows_failed,
    rows_inserted = :rows_inserted, rows_updated = :rows_updated, rows_unchanged = :rows_unchanged,
    started_at = :started_at, finished_at = :finished_at,
    host = :host, device = :device,
    padding_efficiency = :padding_efficiency,
    tokens_per_s = :tokens_per_s,
    oom_splits = CAST(:oom_splits AS integer),
    engine = :engine,
    progress_counts = :progress_counts
WHERE run_id = :run_id AND shard_id = :shard_id
