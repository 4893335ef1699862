-- Record that the SQL sink created results table :results_table (in the transaction that creates it). A
-- record left by a table of that name that was dropped (the demo replaces its own) now names this one.
INSERT INTO shardwise_tables (results_table, created_at) VALUES (:results_table, :created_at)
ON CONFLICT (results_table) DO UPDATE SET created_at = excluded.created_at
