-- The merge's split, recorded in the same transaction as the claim and the rows.
UPDATE shardwise_commits
SET rows_inserted = :rows_inserted, rows_updated = :rows_updated, rows_unchanged = :rows_unchanged
WHERE run_id = :run_id AND shard_id = :shard_id AND chunk = :chunk
