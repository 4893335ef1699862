-- For writes that may be skipped (live progress): give up on a busy database after
-- a moment instead of queueing behind a merge. pragmas.sql's busy_timeout comes back after.
PRAGMA busy_timeout = 200
