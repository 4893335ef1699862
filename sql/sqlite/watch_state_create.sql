-- The last change each named watcher announced, so that a restarted watcher
-- catches up on what changed while it was away (shardwise.watch.progress).
CREATE TABLE IF NOT EXISTS shardwise_watch_state (
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)
