-- Take run :run_id's lease for :owner, in one conditional UPDATE: only when nobody holds it (never
-- leased, or expired by :now), when :owner holds it already (a retried start), or when :take_from
-- still holds it (a forced takeover of the owner the resumer saw: if another resumer took it
-- meanwhile, nothing changes). No row updated means refused; the caller reads rowcount.
-- {INSTANT}() compares the instants, whatever the precision of SQLite's ISO text.
UPDATE shardwise_runs
SET owner = :owner,
    lease_expires_at = :lease_expires_at
WHERE run_id = :run_id
  AND (lease_expires_at IS NULL
       OR {INSTANT}(lease_expires_at) <= {INSTANT}(:now)
       OR owner = :owner
       OR owner = CAST(:take_from AS text))
