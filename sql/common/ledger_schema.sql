-- The run ledger, every table of it: the schema version, runs, their shards, each shard's status
-- changes and committed chunks, dead letters, and the Parquet objects scored. A new ledger is made by
-- these statements and ledger_version_record.sql in one transaction (ledger_sql.create_ledger), under
-- schema_lock.sql on PostgreSQL, in a BEGIN IMMEDIATE transaction on SQLite; every statement is
-- idempotent. A ledger made by another layout is refused, never altered (schema.check_ledger_version).
-- {WORDS} are the dialect's types (sqlfiles.py).

-- The layout's version, one row (ledger_version_record.sql writes it; LEDGER_SCHEMA_VERSION in schema.py).
CREATE TABLE IF NOT EXISTS shardwise_schema (
    id       integer PRIMARY KEY CHECK (id = 1),
    version  integer NOT NULL
);

CREATE TABLE IF NOT EXISTS shardwise_runs (
    run_id           text PRIMARY KEY,
    started_by       text NOT NULL,
    triggered_by     text,
    parameters       {JSON} NOT NULL,
    model_name       text NOT NULL,
    model_version    text NOT NULL,
    precision        text NOT NULL,
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

-- A shard's committed chunks: one row per chunk, inserted in the transaction that merges the
-- chunk's rows and dead letters, so the row is the chunk's done-mark. A retried or racing writer
-- that finds it merges nothing. position says where the next chunk starts: {"rows": rows of the
-- shard up to and including this chunk, "key": the key of its last row (SQL sources)}. counts
-- holds the sums of the model's count outputs over the chunk's scored rows ({"completion_tokens": 72,
-- ...}; NULL for a model that declares none), so a shard's and a run's totals are sums of marks.
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

-- Every change of a shard's status, one row each, written by shardwise/results/shard_states.py in
-- the transaction that changes it: from which status to which, by which attempt, when, by which
-- worker, with the error of a try that failed. shardwise_shards keeps the current status, the
-- attempt count and the last error; this table keeps the history (a run's retries, how long each
-- attempt ran).
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

-- The provider batches a window of rows became (a remote model's --batch-api): one row per batch,
-- inserted in its own transaction right after the provider gave its id and before the run waits on
-- it, so a resumed or retried shard finds the ids of the same window (window_key: a hash of the
-- window's row keys, which the deterministic plan gives again) and collects them instead of
-- submitting again. position is the shard's row count before the window, first_key its first row's
-- key; status is 'submitted' until the batch ends, then the provider's final word ('completed',
-- 'ended', 'expired', ...) or 'timed out' when the 24-hour completion window passed first.
CREATE TABLE IF NOT EXISTS shardwise_provider_batches (
    run_id        text NOT NULL,
    shard_id      integer NOT NULL,
    window_key    text NOT NULL,
    batch_index   integer NOT NULL,
    position      bigint NOT NULL,
    first_key     text NOT NULL,
    rows_sent     integer NOT NULL,
    provider      text NOT NULL,
    batch_id      text NOT NULL,
    submitted_at  {TIMESTAMP} NOT NULL,
    status        text NOT NULL,
    ended_at      {TIMESTAMP},
    PRIMARY KEY (run_id, shard_id, window_key, batch_index)
);

-- What each committed chunk used (shardwise/cost/usage.py): the device kind it was scored on, the
-- seconds it held it, and its cost in dollars (NULL: not priced: a local model with no price per
-- device-hour, or a remote model the price table does not know). Inserted in the transaction that
-- merges the chunk and writes its mark in shardwise_chunks, so a run's cost is the sum of its
-- committed chunks', exact across retries and resumes.
CREATE TABLE IF NOT EXISTS shardwise_chunk_usage (
    run_id     text NOT NULL,
    shard_id   integer NOT NULL,
    chunk      integer NOT NULL,
    device     text NOT NULL,
    device_s   {DOUBLE} NOT NULL,
    cost_usd   {DOUBLE},
    PRIMARY KEY (run_id, shard_id, chunk)
);

-- The chunk each shard of a budgeted run is scoring, held at its estimate (shardwise/cost/budget.py):
-- one row per shard, replaced each time the shard's attempt reserves its next chunk, in a transaction
-- that locks the run's row and checks that the committed usage, the other shards' live holds and this
-- one stay within the budget. A hold counts only while its attempt is the shard's current one, running
-- with a live lease, and its chunk has no mark in shardwise_chunks (once it has, its usage counts
-- instead): a killed worker's hold lapses with its lease, or at once when a new attempt takes the shard.
CREATE TABLE IF NOT EXISTS shardwise_budget_holds (
    run_id    text NOT NULL,
    shard_id  integer NOT NULL,
    attempt   integer NOT NULL,
    owner     text NOT NULL,
    chunk     integer NOT NULL,
    cost_usd  {DOUBLE} NOT NULL,
    tokens    bigint NOT NULL,
    held_at   {TIMESTAMP} NOT NULL,
    PRIMARY KEY (run_id, shard_id)
);

-- The budget the invocation that last ended a run ran under (a resume may change it), written as it
-- finishes the run: `shardwise runs` compares it with the run's usage to flag a run that ended past it.
CREATE TABLE IF NOT EXISTS shardwise_run_budgets (
    run_id        text PRIMARY KEY REFERENCES shardwise_runs (run_id),
    budget_usd    {DOUBLE},
    budget_tokens bigint
);
