-- The run ledger: runs, their shards, dead letters, and the Parquet objects scored.
-- Every statement is idempotent; ensure_schema runs this under schema_lock.sql on PostgreSQL,
-- in a BEGIN IMMEDIATE transaction on SQLite. {WORDS} are the dialect's types (sqlfiles.py).

CREATE TABLE IF NOT EXISTS shardwise_runs (
    run_id           text PRIMARY KEY,
    started_by       text NOT NULL,
    triggered_by     text,
    parameters       {JSON} NOT NULL,
    model_name       text NOT NULL,
    model_version    text NOT NULL,
    precision        text,
    precision_agreement {DOUBLE},
    precision_agreement_from text,
    code_version     text NOT NULL,
    source_identity  text NOT NULL,
    source_snapshot  text,
    results_table    text NOT NULL,
    plan             text NOT NULL,
    status           text NOT NULL CHECK (status IN ('running', 'completed', 'failed')),
    started_at       {TIMESTAMP} NOT NULL,
    finished_at      {TIMESTAMP},
    rows_in          bigint NOT NULL DEFAULT 0,
    rows_out         bigint NOT NULL DEFAULT 0,
    rows_failed      bigint NOT NULL DEFAULT 0,
    shards_total     integer NOT NULL DEFAULT 0,
    shards_done      integer NOT NULL DEFAULT 0,
    shards_failed    integer NOT NULL DEFAULT 0,
    owner            text,
    lease_expires_at {TIMESTAMP}
);

CREATE TABLE IF NOT EXISTS shardwise_shards (
    run_id              text NOT NULL REFERENCES shardwise_runs (run_id),
    shard_id            integer NOT NULL,
    bounds              {JSON} NOT NULL,
    expected_rows       bigint NOT NULL,
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'running', 'retrying', 'done', 'failed')),
    attempts            integer NOT NULL DEFAULT 0,
    rows_in             bigint,
    rows_out            bigint,
    rows_failed         bigint,
    rows_inserted       bigint,
    rows_updated        bigint,
    rows_unchanged      bigint,
    started_at          {TIMESTAMP},
    finished_at         {TIMESTAMP},
    host                text,
    device              text,
    padding_efficiency  {DOUBLE},
    tokens_per_s        {DOUBLE},
    oom_splits          integer,
    engine              {JSON},
    last_error          text,
    progress_rows       bigint,
    progress_failed     bigint,
    progress_at         {TIMESTAMP},
    progress_counts     {JSON},
    owner               text,
    lease_expires_at    {TIMESTAMP},
    PRIMARY KEY (run_id, shard_id)
);

CREATE TABLE IF NOT EXISTS shardwise_errors (
    id                 {ID_KEY},
    run_id             text NOT NULL,
    shard_id           integer NOT NULL,
    source_key         text,
    error_class        text NOT NULL,
    message            text NOT NULL,
    input_fingerprint  text,
    attempt            integer NOT NULL,
    created_at         {TIMESTAMP} NOT NULL,
    results_table      text NOT NULL
);

CREATE INDEX IF NOT EXISTS shardwise_errors_run_shard ON shardwise_errors (run_id, shard_id);

CREATE TABLE IF NOT EXISTS shardwise_objects (
    source_identity  text NOT NULL,
    destination      text NOT NULL,
    object_key       text NOT NULL,
    etag             text NOT NULL,
    run_id           text NOT NULL,
    seen_at          {TIMESTAMP} NOT NULL,
    PRIMARY KEY (source_identity, destination, object_key, etag)
);
