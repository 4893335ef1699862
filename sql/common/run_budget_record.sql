-- The budget the invocation finishing a run ran under (NULLs: none), replacing an earlier one's.
INSERT INTO shardwise_run_budgets (run_id, budget_usd, budget_tokens)
VALUES (:run_id, :budget_usd, :budget_tokens)
ON CONFLICT (run_id) DO UPDATE SET budget_usd = excluded.budget_usd, budget_tokens = excluded.budget_tokens
