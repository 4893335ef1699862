-- Every column, so that a ledger made before a column was added (see ledger_sql._UPGRADES)
-- still reads; the code takes what it knows and defaults the rest.
SELECT *
FROM shardwise_runs
WHERE run_id = :run_id
