-- How many shards of each run are in each status, for the runs listed (shardwise runs).
SELECT run_id, status, COUNT(*) AS shards
FROM shardwise_shards
WHERE run_id IN :run_ids
GROUP BY run_id, status
