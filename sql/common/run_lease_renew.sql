-- The flow's process renews the lease of the run it holds. Nothing changes once another process
-- took the run over, or once the run finished (finish_run releases the lease).
UPDATE shardwise_runs
SET lease_expires_at = :lease_expires_at
WHERE run_id = :run_id AND owner = :owner AND status = 'running'
