-- The last change each named watcher announced, so that a restarted or reconnected
-- watcher catches up on what changed while it was away (shardwise.watch.progress).
CREATE TABLE IF NOT EXISTS shardwise_watch_state (
    name text PRIMARY KEY,
    state jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)
