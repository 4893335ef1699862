-- Runs inside BEGIN IMMEDIATE, which already holds SQLite's write lock.
SELECT model_version, results_table, plan
FROM shardwise_runs
WHERE run_id = :run_id
