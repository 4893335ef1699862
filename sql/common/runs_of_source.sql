-- The runs that read :source_identity into :results_table, with their plans: a redrive looks here for
-- the earlier redrives of the same run (their plans say redrive_of and hold the keys they scored).
SELECT run_id, plan
FROM shardwise_runs
WHERE source_identity = :source_identity AND results_table = :results_table
ORDER BY started_at, run_id
