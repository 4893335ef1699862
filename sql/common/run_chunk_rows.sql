-- The rows a run committed (scored and dead-lettered), over every chunk of every shard.
SELECT COALESCE(SUM(rows_in), 0) FROM shardwise_chunks WHERE run_id = :run_id
