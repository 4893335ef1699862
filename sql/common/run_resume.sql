UPDATE shardwise_runs
SET status = 'running', finished_at = NULL
WHERE run_id = :run_id
