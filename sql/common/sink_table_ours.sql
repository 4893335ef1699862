-- Whether the SQL sink created results table :results_table: a row when it did.
SELECT 1 FROM shardwise_tables WHERE results_table = :results_table
