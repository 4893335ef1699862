-- The chunks the run's other shards are scoring now, each at its estimate: a hold counts while its
-- attempt is the shard's current one, running with a live lease, and its chunk is not marked committed
-- yet (a committed chunk counts by its usage instead). A killed worker's hold lapses with its lease.
SELECT h.owner, h.cost_usd, h.tokens
FROM shardwise_budget_holds h
JOIN shardwise_shards s ON s.run_id = h.run_id AND s.shard_id = h.shard_id
WHERE h.run_id = :run_id
  AND h.shard_id <> :shard_id
  AND s.status = 'running'
  AND s.attempts = h.attempt
  AND s.owner = h.owner
  AND {INSTANT}(s.lease_expires_at) > {INSTANT}(:now)
  AND NOT EXISTS (
      SELECT 1 FROM shardwise_chunks c
      WHERE c.run_id = h.run_id AND c.shard_id = h.shard_id AND c.chunk = h.chunk
  )
