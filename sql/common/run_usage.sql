-- A run's device time and cost per device kind, over every chunk it committed: unpriced counts the
-- chunks with no cost, chunks all of them.
SELECT device,
       COALESCE(SUM(device_s), 0) AS device_s,
       SUM(cost_usd) AS cost_usd,
       COUNT(*) - COUNT(cost_usd) AS unpriced,
       COUNT(*) AS chunks
FROM shardwise_chunk_usage
WHERE run_id = :run_id
GROUP BY device
ORDER BY device
