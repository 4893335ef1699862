-- A resumed run (same run_id) keeps its stored row, plan included.
INSERT INTO shardwise_runs (
    run_id, started_by, triggered_by, parameters, model_name, model_version, precision,
    precision_agreement, precision_agreement_from, code_version,
    source_identity, source_snapshot, results_table, plan, status, started_at, shards_total
) VALUES (
    :run_id, :started_by, :triggered_by, :parameters, :model_name, :model_version, :precision,
    :precision_agreement, :precision_agreement_from,
    :code_version, :source_identity, :source_snapshot, :results_table, :plan, 'running',
    :started_at, :shards_total
)
ON CONFLICT (run_id) DO NOTHING
