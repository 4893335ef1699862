-- Run on every new SQLite connection. busy_timeout comes first so that switching
-- to WAL waits for other connections instead of failing with "database is locked".
-- WAL lets shard tasks in threads stage and read while one of them merges.
PRAGMA busy_timeout = 60000;
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL
