-- Every change of a shard's status, one row each, written by shardwise/results/shard_states.py in
-- the transaction that changes it: from which status to which, by which attempt, when, by which
-- worker, with the error of a try that failed. shardwise_shards keeps the current status, the
-- attempt count and the last error; this table keeps the history (a run's retries, how long each
-- attempt ran). Every statement is idempotent; ensure_schema runs this under schema_lock.sql on
-- PostgreSQL, in a BEGIN IMMEDIATE transaction on SQLite. {WORDS} are the dialect's types.

CREATE TABLE IF NOT EXISTS shardwise_shard_transitions (
    id           {ID_KEY},
    run_id       text NOT NULL,
    shard_id     integer NOT NULL,
    attempt      integer NOT NULL,
    from_status  text NOT NULL,
    to_status    text NOT NULL,
    at           {TIMESTAMP} NOT NULL,
    worker       text,
    error        text
);

CREATE INDEX IF NOT EXISTS shardwise_shard_transitions_run_shard
    ON shardwise_shard_transitions (run_id, shard_id);
