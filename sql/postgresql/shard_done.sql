UPDATE shardwise_shards
SET status = 'done',
    attempts = GREATEST(attempts, CAST(:attempt AS integer)),
    rows_in = :rows_in, rows_out = :rows_out, rows_failed = :rows_failed,
    rows_inserted = :rows_inserted, rows_updated = :rows_updated, rows_unchanged = :rows_unchanged,
    started_at = CAST(:started_at AS timestamptz), finished_at = CAST(:finished_at AS timestamptz),
    host = :host, device = :device,
    padding_efficiency = CAST(:padding_efficiency AS double precision),
    tokens_per_s = CAST(:tokens_per_s AS double precision),
    oom_splits = CAST(:oom_splits AS integer),
    engine = CAST(:engine AS jsonb)
WHERE run_id = :run_id AND shard_id = :shard_id
