-- The SQL sink's commit records: one row per chunk merged into a results table of this database,
-- inserted in the transaction that merges the chunk, so the row exists exactly when the rows do.
-- The ledger (possibly in another database) marks the chunk after this commit; a resumed or
-- racing writer that finds the row here merges nothing. position and the counts are the ones the
-- merge recorded, so a chunk whose ledger mark was lost is marked with them.
CREATE TABLE IF NOT EXISTS shardwise_commits (
    results_table   text NOT NULL,
    run_id          text NOT NULL,
    shard_id        integer NOT NULL,
    chunk           integer NOT NULL,
    position        {JSON} NOT NULL,
    rows_inserted   bigint NOT NULL,
    rows_updated    bigint NOT NULL,
    rows_unchanged  bigint NOT NULL,
    committed_at    {TIMESTAMP} NOT NULL,
    PRIMARY KEY (run_id, shard_id, chunk)
);

-- The results tables the SQL sink created in this database, recorded in the transaction that creates
-- each: only these gain, as a later run needs them, the nullable output columns they lack (a run with
-- --json-schema adds parsed). A table the user made is never altered.
CREATE TABLE IF NOT EXISTS shardwise_tables (
    results_table   text PRIMARY KEY,
    created_at      {TIMESTAMP} NOT NULL
);
