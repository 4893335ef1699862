-- Serialises concurrent ensure_schema calls: CREATE TABLE IF NOT EXISTS alone can
-- still fail with a unique violation on pg_type when two sessions race.
-- The lock is released when the transaction ends.
SELECT pg_advisory_xact_lock(hashtext('shardwise.ensure_schema'))
