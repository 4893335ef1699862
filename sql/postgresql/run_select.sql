SELECT run_id, started_by, triggered_by, parameters, model_name, model_version, code_version,
       source_identity, source_snapshot, results_table, plan, status, started_at, finished_at,
       rows_in, rows_out, rows_failed, shards_total, shards_done, shards_failed
FROM shardwise_runs
WHERE run_id = :run_id
