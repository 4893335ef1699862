-- Upgrade: a ledger made before seen objects were keyed by destination gains the column, each stored
-- pair filed under the results of the run that recorded it (shardwise_runs.results_table: that run
-- scored the object into exactly those), and the key (source, destination, object, ETag).
ALTER TABLE shardwise_objects ADD COLUMN destination text;
UPDATE shardwise_objects o SET destination = r.results_table FROM shardwise_runs r WHERE r.run_id = o.run_id;
UPDATE shardwise_objects SET destination = '' WHERE destination IS NULL;
ALTER TABLE shardwise_objects ALTER COLUMN destination SET NOT NULL;
ALTER TABLE shardwise_objects DROP CONSTRAINT IF EXISTS shardwise_objects_pkey;
ALTER TABLE shardwise_objects ADD CONSTRAINT shardwise_objects_pkey
    PRIMARY KEY (source_identity, destination, object_key, etag)
