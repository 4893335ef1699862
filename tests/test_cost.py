"""Pricing a run (shardwise/cost): device time at the operator's price, remote tokens at the price table's,
and the figures a run's cost is compared by. The remote prices are genai-prices' bundled data, checked
against the providers' published prices for two well-known models."""

from __future__ import annotations

import socket

import pytest

from shardwise.cost import Pricing, RunUsage, remote_model, token_cost
from shardwise.cost.budget import Budget, Hold, check_counts_tokens, chunk_rows_within, decide, past_budget
from shardwise.cost.meter import ChunkMeter
from shardwise.cost.prices import _known
from shardwise.cost.usage import ChunkUsage, dollars
from shardwise.errors import BudgetReached, ConfigError

M = 1_000_000


def test_a_remote_models_tokens_are_priced_at_the_tables_prices_cached_and_batch_included() -> None:
    # gpt-4o-mini: $0.15 per 1M input tokens, $0.075 cached, $0.60 output; the Batch API halves them.
    row = {"prompt_tokens": 1000, "cached_tokens": 200, "completion_tokens": 500}
    assert token_cost("openai:gpt-4o-mini", row) == pytest.approx((800 * 0.15 + 200 * 0.075 + 500 * 0.6) / M)
    assert token_cost("openai:gpt-4o-mini", {**row, "cached_tokens": 0}) == pytest.approx(
        (1000 * 0.15 + 500 * 0.6) / M
    )
    batch = token_cost("openai:gpt-4o-mini", {**row, "cached_tokens": 0}, batch=True)
    assert batch == pytest.approx((1000 * 0.15 + 500 * 0.6) / 2 / M)
    # claude-sonnet-4-5: $3 input, $0.30 cache read, $15 output per 1M.
    sonnet = token_cost("anthropic:claude-sonnet-4-5", row)
    assert sonnet == pytest.approx((800 * 3 + 200 * 0.3 + 500 * 15) / M)


def test_each_row_is_priced_as_its_own_request_so_long_prompt_tiers_apply_as_billed() -> None:
    rows = [{"prompt_tokens": 1000, "completion_tokens": 500}] * 300  # 300k prompt tokens in all
    pricing = Pricing("anthropic:claude-sonnet-4-5")
    one = token_cost("anthropic:claude-sonnet-4-5", rows[0])
    assert one is not None and pricing.cost(rows, 12.0) == pytest.approx(300 * one)
    whole = token_cost(
        "anthropic:claude-sonnet-4-5", {"prompt_tokens": 300_000, "completion_tokens": 150_000}
    )
    assert whole is not None and whole > 300 * one, "summed into one request it would cross the 200k tier"


def test_a_model_the_table_does_not_know_and_a_local_model_without_a_price_are_unpriced() -> None:
    assert remote_model("openai:gpt-4o-mini") == ("openai", "gpt-4o-mini")
    assert remote_model("openai-embed:text-embedding-3-small") == ("openai", "text-embedding-3-small")
    assert remote_model("minilm") is None and remote_model("hf:/models/x") is None
    self_hosted = Pricing("openai:SmolLM2-135M-Instruct")
    assert not self_hosted.priced and self_hosted.cost([{"prompt_tokens": 10}], 1.0) is None
    assert "no price known for openai:SmolLM2-135M-Instruct" in self_hosted.describe()
    assert Pricing("minilm").cost([], 60.0) is None and not Pricing("minilm").priced
    local = Pricing("minilm", device_per_hour=3.6)
    assert local.priced and local.cost([{"prompt_tokens": 10}], 100.0) == pytest.approx(0.1)
    assert Pricing("openai:gpt-4o-mini", device_per_hour=3.6).cost([], 100.0) == 0, "tokens, not time"


@pytest.mark.parametrize("price", [-1, float("nan"), float("inf"), "2", True])
def test_a_bad_price_per_device_hour_is_refused(price: object) -> None:
    with pytest.raises(ConfigError, match="price per device-hour must be a number of dollars"):
        Pricing("minilm", device_per_hour=price)  # type: ignore[arg-type]


def test_prices_come_from_the_bundled_table_without_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object) -> None:
        raise AssertionError("genai-prices reached for the network")

    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setattr(socket, "create_connection", refused)
    _known.cache_clear()
    assert token_cost("openai:gpt-4o", {"prompt_tokens": 1000, "completion_tokens": 100}) is not None


def test_a_chunk_is_timed_from_the_last_commit_and_priced_by_its_rows() -> None:
    now = [100.0]
    meter = ChunkMeter("cuda:1", Pricing("m", device_per_hour=36.0), ["completion_tokens"], lambda: now[0])
    now[0] = 110.0
    usage = meter.measure([{"completion_tokens": 3, "text": "x"}, {"completion_tokens": 4, "text": "y"}])
    assert usage == ChunkUsage("cuda", 10.0, pytest.approx(0.1))
    meter.restart()
    now[0] = 112.5
    assert meter.measure([]).device_s == 2.5
    with pytest.raises(ConfigError):
        ChunkUsage("cpu", -1.0)


def test_a_runs_usage_gives_its_rates_and_says_them() -> None:
    usage = RunUsage(
        rows=2000,
        counts={"prompt_tokens": 300_000, "completion_tokens": 100_000, "cached_tokens": 5},
        device_s={"cuda": 3600.0, "cpu": 36.0},
        cost_usd=2.0,
    )
    assert usage.tokens == 400_000 and usage.device_seconds == 3636.0
    assert usage.per_1k_rows == 1.0 and usage.per_1m_tokens == 5.0
    assert (
        usage.said()
        == "cost $2.00 ($1.00/1k rows, $5.00/1M tokens), 1.0100 device-hours (cpu 36.0 s, cuda 3,600.0 s)"
    )
    assert RunUsage(rows=3, device_s={"cpu": 1.0}).said().startswith("cost unknown (no price set), 0.0003")
    assert RunUsage().as_json()["cost_usd_per_1k_rows"] is None
    assert dollars(0.0012345) == "$0.001234" and dollars(None) == "-"
    # Never in exponent notation, however small: a person reads it, and scripts parse the stop line.
    assert dollars(3.265e-05) == "$0.00003265" and dollars(0.0) == "$0" and dollars(0.5) == "$0.5"


def test_a_token_budget_counts_prompt_and_completion_tokens_beside_the_chunks_in_flight() -> None:
    committed = RunUsage(rows=8, counts={"prompt_tokens": 300, "completion_tokens": 100}, chunks=2)
    assert decide(Budget(tokens=1000), committed, [Hold(0.0, 200)]) == Hold(0.0, 200), "400 + 200 + 200"
    with pytest.raises(BudgetReached, match="400 tokens spent and 400 in flight of the 999-token budget"):
        decide(Budget(tokens=999), committed, [Hold(0.0, 200), Hold(0.0, 200)])
    priced = RunUsage(counts=committed.counts, cost_usd=0.5, chunks=2)
    with pytest.raises(BudgetReached, match="-token budget"):
        decide(Budget(usd=10.0, tokens=700), priced, [Hold(0.25, 200)])  # either budget stops it
    with pytest.raises(BudgetReached, match=r"\$0.5 spent and \$0.25 in flight of the \$0.9 budget"):
        decide(Budget(usd=0.9, tokens=10_000), priced, [Hold(0.25, 200)])
    assert decide(Budget(usd=1.0), priced, [Hold(0.25, 200)]) == Hold(0.25, 200), "$1.00 is within $1.00"
    assert decide(Budget(tokens=10), RunUsage(), []) == Hold(), "the run's first chunk goes alone"
    assert decide(Budget(tokens=10), RunUsage(), [Hold()]) is None, "another waits for it"


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_a_token_budget_is_a_whole_number_above_zero(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"whole number of tokens above 0; got .* \(give --budget-tokens"):
        Budget(tokens=bad)  # type: ignore[arg-type]
    assert Budget.of(None, None) is None and Budget.of(2.0, 5) == Budget(2.0, 5)


def test_a_token_budget_needs_a_model_that_counts_tokens() -> None:
    check_counts_tokens("lm", ("prompt_tokens", "completion_tokens"), 100)
    check_counts_tokens("minilm", (), None)
    with pytest.raises(ConfigError, match=r"model 'minilm' counts none .* drop --budget-tokens"):
        check_counts_tokens("minilm", (), 100)


def test_a_budgeted_chunk_holds_a_tenth_of_each_budget_at_the_plans_estimate() -> None:
    # The 30-row generation run that spent $0.09179 of a $0.01 budget in one chunk: at gpt-4o-mini's
    # prices, a row of 1,000 prompt tokens and 100 new ones costs at most $0.00021.
    row = token_cost("openai:gpt-4o-mini", {"prompt_tokens": 1000, "completion_tokens": 100})
    assert row == pytest.approx((1000 * 0.15 + 100 * 0.6) / 1e6)
    rows = chunk_rows_within(Budget(0.01), row, None, 1024, "")
    assert rows * row <= 0.001 < (rows + 1) * row, "as many rows as a tenth of the budget pays for"
    assert chunk_rows_within(Budget(100.0), row, None, 1024, "") == 1024, "never more than the model's chunk"
    both = chunk_rows_within(Budget(0.01, 30_000), row, 1_100, 1024, "")
    assert both == 30_000 // 10 // 1_100 < rows, "the tighter of the two budgets"
    with pytest.raises(
        ConfigError, match=r"--budget-usd 0.001 cannot hold even one row .* give --budget-usd 0.0021 or more"
    ):
        chunk_rows_within(Budget(0.001), row, None, 1024, "")
    with pytest.raises(ConfigError, match=r"needs what a row costs, .* does not know: no earlier run"):
        chunk_rows_within(Budget(0.01), None, None, 1024, "no earlier run")


def test_a_run_past_its_budget_is_named_with_each_budget_it_passed() -> None:
    usage = RunUsage(rows=30, counts={"prompt_tokens": 900, "completion_tokens": 180}, cost_usd=0.09179)
    assert past_budget(Budget(0.01), usage) == "past its budget: $0.09179 spent of the $0.01 budget"
    assert past_budget(Budget(0.01, 1_000), usage) == (
        "past its budget: $0.09179 spent of the $0.01 budget and 1,080 tokens spent of the 1,000-token budget"
    )
    assert past_budget(Budget(0.1, 2_000), usage) is None and past_budget(None, usage) is None


def test_a_remote_models_chunks_hold_none_of_our_devices_and_every_report_says_so_as_the_plan_does() -> None:
    from shardwise.pipeline.estimate import TokenCount, estimate_cost

    now = [100.0]
    meter = ChunkMeter("cpu", Pricing("openai:gpt-4o-mini"), ["prompt_tokens"], lambda: now[0])
    now[0] = 130.0  # half a minute waiting on the provider: its devices' time, not ours
    usage = meter.measure([{"prompt_tokens": 1000}])
    assert (usage.device, usage.device_s) == ("remote", 0.0) and usage.cost_usd == pytest.approx(0.00015)
    run = RunUsage(rows=1, counts={"prompt_tokens": 1000}, device_s={"remote": 0.0}, cost_usd=0.00015)
    tokens = TokenCount(rows=1, counted_rows=1, per_row=[1000], max_new_tokens=0, sampled=False)
    planned = estimate_cost(tokens, Pricing("openai:gpt-4o-mini"), [])
    assert run.said().endswith(f"device-hours: {planned.hours_from}"), "the summary says what the plan says"
    assert (
        run.hours_figure()
        == planned.hours_from
        == "none of ours: a remote model runs on its provider's devices"
    )
