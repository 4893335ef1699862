-- A shard's attempt holds its next chunk at its estimate, replacing the shard's earlier hold (see
-- ledger_schema.sql); run in the transaction that locked the run's row and checked the budget.
INSERT INTO shardwise_budget_holds (run_id, shard_id, attempt, owner, chunk, cost_usd, tokens, held_at)
VALUES (:run_id, :shard_id, :attempt, :owner, :chunk, :cost_usd, :tokens, :held_at)
ON CONFLICT (run_id, shard_id) DO UPDATE SET
    attempt = excluded.attempt,
    owner = excluded.owner,
    chunk = excluded.chunk,
    cost_usd = excluded.cost_usd,
    tokens = excluded.tokens,
    held_at = excluded.held_at
