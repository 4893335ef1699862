SELECT model_version, results_table, plan
FROM shardwise_runs
WHERE run_id = :run_id
FOR UPDATE
