-- Record that the SQL sink created results table :results_table (in the transaction that creates it).
INSERT INTO shardwise_tables (results_table, created_at) VALUES (:results_table, :created_at)
