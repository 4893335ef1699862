-- The last change each named watcher announced, so that a restarted or reconnected
-- watcher catches up on what changed while it was away (shardwise.watch.progress).
CREATE TABLE IF NOT EXISTS shardwise_watch_state (
    name text PRIMARY KEY,
    state {JSON} NOT NULL,
    updated_at {TIMESTAMP} NOT NULL DEFAULT CURRENT_TIMESTAMP
)
