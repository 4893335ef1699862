-- How many shards of each run are in each status, for the runs listed (shardwise runs); a shard that
-- failed because the run's budget stopped it (its last error a BudgetReached) counts as 'stopped'.
SELECT run_id, shard_status, COUNT(*) AS shards
FROM (
    SELECT run_id,
           CASE WHEN status = 'failed' AND last_error LIKE 'BudgetReached:%' THEN 'stopped'
                ELSE status END AS shard_status
    FROM shardwise_shards
    WHERE run_id IN :run_ids
) AS shard
GROUP BY run_id, shard_status
