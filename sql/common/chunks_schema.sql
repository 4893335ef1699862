-- A shard's committed chunks: one row per chunk, inserted in the transaction that merges the
-- chunk's rows and dead letters, so the row is the chunk's done-mark. A retried or racing writer
-- that finds it merges nothing. position says where the next chunk starts: {"rows": rows of the
-- shard up to and including this chunk, "key": the key of its last row (SQL sources)}. counts
-- holds the sums of the model's count outputs over the chunk's scored rows ({"completion_tokens": 72,
-- ...}; NULL for a model that declares none), so a shard's and a run's totals are sums of marks.
-- Every statement is idempotent; ensure_schema runs this under schema_lock.sql on PostgreSQL,
-- in a BEGIN IMMEDIATE transaction on SQLite. {WORDS} are the dialect's types (sqlfiles.py).

CREATE TABLE IF NOT EXISTS shardwise_chunks (
    run_id          text NOT NULL,
    shard_id        integer NOT NULL,
    chunk           integer NOT NULL,
    attempt         integer NOT NULL,
    rows_in         bigint NOT NULL,
    rows_out        bigint NOT NULL,
    rows_failed     bigint NOT NULL,
    rows_truncated  bigint NOT NULL,
    rows_inserted   bigint NOT NULL,
    rows_updated    bigint NOT NULL,
    rows_unchanged  bigint NOT NULL,
    position        {JSON} NOT NULL,
    committed_at    {TIMESTAMP} NOT NULL,
    counts          {JSON},
    PRIMARY KEY (run_id, shard_id, chunk),
    FOREIGN KEY (run_id, shard_id) REFERENCES shardwise_shards (run_id, shard_id)
);
