"""Remote chat models against a real ``vllm serve`` on loopback, with a fault proxy of our own in front.

One server for the module (30-90 s to start, so every test here is slow).
The proxy answers some requests with 429 (with ``Retry-After``), 500 or a cut
connection; every other answer is vLLM's own, through the official ``openai``
and ``anthropic`` SDKs (vLLM 0.32 serves ``/v1/messages``).
"""

from __future__ import annotations

import time

import pytest
import torch
from endpoint_servers import (
    API_KEY,
    KEY_REFERENCE,
    SERVED_NAME,
    AnthropicBatchServer,
    BatchServer,
    FaultProxy,
    every,
    free_port,
    resolver,
)

from shardwise import Engine, EngineConfig
from shardwise.errors import ConfigError, InputError, OutputError, RetryDeadlineError
from shardwise.model import SelfBatching
from shardwise.model.generation import GenerationSettings
from shardwise.model.text import Inputs
from shardwise.models import get_spec
from shardwise.models.endpoints import EndpointOptions, EndpointSpec
from shardwise.models.endpoints.failures import EndpointUnreachable
from shardwise.retry_policy import RetryPolicy

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm-serve")]  # one vllm serve at a time

GREEDY = GenerationSettings(max_new_tokens=8)
TEXTS = [f"row {i}: the shard commits its chunk {i % 7} once" for i in range(30)]


@pytest.fixture(scope="module")
def origin(llama_origin: str) -> str:
    """The worker's ``vllm serve`` of the tiny Llama (tests/models/conftest.py)."""
    return llama_origin


def spec(
    base: str, provider: str = "openai", settings: GenerationSettings = GREEDY, **options
) -> EndpointSpec:
    opened = get_spec(f"{provider}:{SERVED_NAME}")
    assert isinstance(opened, EndpointSpec)
    given = EndpointOptions(api_base=base, api_key=KEY_REFERENCE, **options)
    return opened.configured(given).generating(settings).resolving(resolver)


def scored(model_spec: EndpointSpec, values: list[object]) -> tuple[list[object], dict[str, int]]:
    model = model_spec.load(torch.device("cpu"))
    try:
        return list(model.score_window(values)), model.caller.counts.as_dict()
    finally:
        model.close()


def test_a_window_comes_back_in_order_with_usage_and_dead_letters(origin: str) -> None:
    too_long = "word " * 2000  # far past the server's 512-token context: vLLM's own 400 for that row
    values: list[object] = [*TEXTS[:10], None, too_long, *TEXTS[10:20]]
    outcomes, counts = scored(spec(f"{origin}/v1", max_concurrency=6), values)

    assert len(outcomes) == len(values)
    assert isinstance(outcomes[10], InputError) and "null" in str(outcomes[10])
    refused = outcomes[11]
    assert isinstance(refused, InputError) and "refused the request: 400" in str(refused)
    assert "context" in str(refused).lower() or "token" in str(refused).lower()
    good = [o for i, o in enumerate(outcomes) if i not in (10, 11)]
    for outcome in good:
        assert isinstance(outcome, dict)
        assert outcome["finish_reason"] in ("stop", "length")
        assert outcome["prompt_tokens"] > 0 and 0 < outcome["completion_tokens"] <= 8
        assert outcome["cached_tokens"] == 0
        assert str(outcome["system_fingerprint"]).startswith("vllm-")
    # In input order: the same text again gives the same greedy answer wherever it stands.
    alone, _ = scored(spec(f"{origin}/v1"), [TEXTS[15]])
    assert alone[0]["generated_text"] == outcomes[TEXTS.index(TEXTS[15]) + 2]["generated_text"]
    assert counts["sent"] == 21 and counts["rows_refused"] == 1


def test_429s_500s_and_cut_connections_are_ridden_out_with_the_same_texts(origin: str) -> None:
    clean, _ = scored(spec(f"{origin}/v1"), list(TEXTS))
    with FaultProxy(origin, every(n429=5, n500=20, cut=10)) as proxy:
        faulty, counts = scored(spec(f"{proxy.origin}/v1", max_concurrency=8), list(TEXTS))

    assert [o["generated_text"] for o in faulty] == [o["generated_text"] for o in clean]
    assert [o["completion_tokens"] for o in faulty] == [o["completion_tokens"] for o in clean]
    assert proxy.counts["429"] >= 5 and proxy.counts["500"] >= 1 and proxy.counts["cut"] >= 2
    assert counts["retried"] == proxy.counts["429"] + proxy.counts["500"] + proxy.counts["cut"]
    assert counts["ok"] == len(TEXTS)


@pytest.mark.parametrize(
    ("provider", "path", "what"),
    [
        ("openai", "/v1", "a chat completion: it has no choices"),
        ("anthropic", "", "a message: it has no content"),
    ],
)
def test_a_success_whose_body_is_no_answer_is_that_rows_dead_letter(
    provider: str, path: str, what: str
) -> None:
    """A 200 whose body lacks the answer's fields (a gateway's page, a server's bug) is the row's dead
    letter naming the endpoint and what is missing, never an internal AttributeError."""
    with FaultProxy(f"http://127.0.0.1:{free_port()}", lambda number, body: "malformed") as proxy:
        outcomes, counts = scored(spec(f"{proxy.origin}{path}", provider=provider), TEXTS[:2])
    for outcome in outcomes:
        assert isinstance(outcome, OutputError), outcome
        message = str(outcome)
        assert f"{proxy.origin}{path}" in message and API_KEY not in message
        assert f": the answer (status 200) is not {what}; it was " in message, message
    assert counts["sent"] == 2 and counts["retried"] == 0 and counts["rows_refused"] == 2


def test_an_outage_past_the_deadline_fails_the_window_naming_the_endpoint(origin: str) -> None:
    policy = RetryPolicy(deadline_s=1.5, backoff_s=0.1, backoff_cap_s=0.3)
    with FaultProxy(origin, lambda number, body: "500") as proxy:
        model = spec(f"{proxy.origin}/v1").retrying(policy).load(torch.device("cpu"))
        started = time.monotonic()
        with pytest.raises(RetryDeadlineError) as failed:
            model.score_window(TEXTS[:4])
        model.close()
    assert time.monotonic() - started < 10
    message = str(failed.value)
    assert proxy.origin in message and "retry deadline of 1.5 s" in message and API_KEY not in message


def test_anthropic_messages_give_the_chat_texts(origin: str) -> None:
    chat, _ = scored(spec(f"{origin}/v1"), TEXTS[:6])
    messages, _ = scored(spec(origin, provider="anthropic"), TEXTS[:6])
    assert len(messages) == len(chat) == 6
    assert [o["generated_text"] for o in messages] == [o["generated_text"] for o in chat]
    assert all(o["prompt_tokens"] > 0 and o["completion_tokens"] > 0 for o in messages)
    assert all(o["finish_reason"] in ("stop", "length") for o in messages)


def test_prompt_columns_system_text_and_chat_off(origin: str) -> None:
    settings = GenerationSettings(prompt="{title}: {text}", system="Be brief.", chat="off", max_new_tokens=4)
    row = Inputs(("text", "title"), ("the body", "The title"))
    with FaultProxy(origin) as proxy:
        outcomes, _ = scored(
            spec(f"{proxy.origin}/v1", settings=settings), [row, Inputs(("text",) * 2, ("a", "b"))]
        )
    assert isinstance(outcomes[0], dict) and outcomes[0]["completion_tokens"] > 0
    assert isinstance(outcomes[1], InputError) and "no column title" in str(outcomes[1])
    assert proxy.bodies == [
        {
            "model": SERVED_NAME,
            "prompt": "Be brief.\n\nThe title: the body",
            "max_tokens": 4,
            "temperature": 0.0,
        }
    ]


def test_a_json_schema_is_sent_as_response_format_and_checked_on_return(origin: str) -> None:
    schema = '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}'
    settings = GenerationSettings(max_new_tokens=24, json_schema=schema)
    with FaultProxy(origin) as proxy:
        outcomes, _ = scored(spec(f"{proxy.origin}/v1", settings=settings), TEXTS[:6])
    assert len(proxy.bodies) >= 6, "one request a row went through the proxy"
    assert all(body["response_format"]["type"] == "json_schema" for body in proxy.bodies)  # type: ignore[index]
    for outcome in outcomes:  # a random model held to the schema: valid JSON, or cut short by max_new_tokens
        if isinstance(outcome, dict):
            assert isinstance(outcome["parsed"], dict) and isinstance(outcome["parsed"]["n"], int)
        else:
            assert isinstance(outcome, OutputError) and str(outcome).startswith(("not JSON", "schema:"))

    unconstrained = GenerationSettings(max_new_tokens=4, json_schema=schema, constrained=False)
    with FaultProxy(origin) as proxy:
        outcomes, _ = scored(spec(f"{proxy.origin}/v1", settings=unconstrained), TEXTS[:2])
    assert len(proxy.bodies) >= 2 and all("response_format" not in body for body in proxy.bodies)
    # a random model's free text is not the schema
    assert len(outcomes) == 2 and all(isinstance(o, OutputError) for o in outcomes)


def test_the_engine_runs_it_as_a_model_that_batches_itself(origin: str) -> None:
    model = spec(f"{origin}/v1").load(torch.device("cpu"))
    try:
        assert isinstance(model, SelfBatching)
        results = list(Engine(model, EngineConfig(window_rows=8)).run(list(enumerate([*TEXTS[:9], ""]))))
    finally:
        model.close()
    assert [r.key for r in results] == list(range(10))
    assert all(r.ok for r in results[:9]) and not results[9].ok


def test_preflight_refuses_a_bad_key_an_unknown_model_and_nothing_listening(origin: str) -> None:
    bad_key = EndpointSpec(
        "openai", SERVED_NAME, EndpointOptions(api_base=f"{origin}/v1", api_key="env:WRONG_KEY")
    )
    with pytest.raises(ConfigError, match="refused the API key") as refused:
        bad_key.resolving(resolver).check_reachable()
    unknown = spec(f"{origin}/v1").configured(EndpointOptions(api_base=f"{origin}/v1", api_key=KEY_REFERENCE))
    with pytest.raises(
        ConfigError, match=f"does not serve model 'gpt-nope'.*serves: {SERVED_NAME}"
    ) as missing:
        EndpointSpec("openai", "gpt-nope", unknown.options).resolving(resolver).check_reachable()
    nothing = EndpointOptions(api_base=f"http://127.0.0.1:{free_port()}/v1", api_key=KEY_REFERENCE)
    with pytest.raises(EndpointUnreachable, match="cannot be reached") as unreachable:
        EndpointSpec("openai", SERVED_NAME, nothing).resolving(resolver).check_reachable()
    spec(f"{origin}/v1").check_reachable()
    spec(origin, provider="anthropic").check_reachable()
    for error in (refused, missing, unreachable):
        line = str(error.value)
        assert "\n" not in line and API_KEY not in line and "sk-wrong" not in line
        assert "env:" in line  # the key is named by its reference


def _run(url: str, base: str, table: str, *more: str) -> float:
    """``shardwise run`` of ``docs`` through the endpoint at ``base``, by its flags; its wall time."""
    from shardwise.flows.cli import main

    argv = [
        "run", "--source", url, "--table", "docs", "--model", f"openai:{SERVED_NAME}", "--api-base", base,
        "--api-key", KEY_REFERENCE, "--progress", "none", "--results-table", table, "--shards", "2",
        "--max-new-tokens", "8", *more,
    ]  # fmt: skip
    started = time.monotonic()
    assert main(argv) == 0
    return time.monotonic() - started


def test_a_run_through_429s_and_500s_writes_each_row_once_with_the_clean_texts(
    origin: str, tmp_path, prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlalchemy as sa
    from flow_data import make_docs

    monkeypatch.setenv(KEY_REFERENCE.removeprefix("env:"), API_KEY)  # the key, where --api-key names it
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = make_docs(url, 200)
    clean_s = _run(url, f"{origin}/v1", "clean", "--max-concurrency", "8")
    with FaultProxy(origin, every(n429=5, n500=20)) as proxy:  # 20% 429s, 5% 500s
        faulty_s = _run(url, f"{proxy.origin}/v1", "faulty", "--max-concurrency", "8")

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        results = {
            table: dict(conn.execute(sa.text(f"select source_key, generated_text from {table}")).all())
            for table in ("clean", "faulty")
        }
        tokens = conn.execute(sa.text("select min(prompt_tokens), min(completion_tokens) from faulty")).one()
        dead = dict(
            conn.execute(
                sa.text("select source_key, message from shardwise_errors where results_table like '%faulty'")
            ).all()
        )
    engine.dispose()
    assert results["faulty"] == results["clean"] and results["clean"]
    written = {str(key) for key in results["faulty"]}
    assert written | set(dead) == {str(key) for key, _ in rows}, "a row or a dead letter per row"
    assert not written & set(dead)
    assert all("refused the request: 400" in m or "text" in m for m in dead.values()), dead
    assert tokens[0] > 0 and tokens[1] > 0
    assert proxy.counts["429"] >= 40 and proxy.counts["500"] >= 10
    print(
        f"\n200 rows + {len(rows) - 200} bad: clean {len(rows) / clean_s:.1f} rows/s ({clean_s:.1f} s); "
        f"behind the proxy {len(rows) / faulty_s:.1f} rows/s ({faulty_s:.1f} s), "
        f"requests {dict(proxy.counts)}; "
        f"{len(results['faulty'])} results, {len(set(dead))} dead letters"
    )


def test_the_batch_api_submits_once_and_a_new_process_collects_by_the_recorded_id(origin: str) -> None:
    rows: list[tuple[str, object]] = [(f"k{i}", text) for i, text in enumerate(TEXTS[:8])]
    rows += [("null", None), ("long", "word " * 2000)]
    clean, _ = scored(spec(f"{origin}/v1"), TEXTS[:8])
    with BatchServer(origin) as server:
        server.hold.clear()  # the batch runs, and does not end until the first process is gone
        first = spec(f"{server.origin}/v1").load(torch.device("cpu"))
        batch_id, refused = first.submit_batch(rows)
        assert batch_id == "batch-1" and set(refused) == {"null"} and "null" in str(refused["null"])
        sent = [key for key, _ in rows if key not in refused]
        assert first.collect_batch(batch_id, sent) is None  # still running
        first.close()  # the process that submitted is gone; the ledger kept batch_id

        server.hold.set()
        second = spec(f"{server.origin}/v1").load(torch.device("cpu"))
        deadline = time.monotonic() + 60
        while (outcomes := second.collect_batch(batch_id, sent)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        second.close()
    assert server.creates == 1, "collected, never submitted again"
    assert outcomes is not None
    assert [outcomes[f"k{i}"]["generated_text"] for i in range(8)] == [o["generated_text"] for o in clean]
    assert all(outcomes[f"k{i}"]["completion_tokens"] > 0 for i in range(8))
    long = outcomes["long"]
    assert isinstance(long, InputError) and "batch batch-1 line failed (400)" in str(long)


def test_anthropic_message_batches_collect_the_messages_texts_without_a_second_create(origin: str) -> None:
    rows: list[tuple[str, object]] = [(f"k{i}", text) for i, text in enumerate(TEXTS[:5])]
    rows.append(("long", "word " * 2000))
    direct, _ = scored(spec(origin, provider="anthropic"), TEXTS[:5])
    with AnthropicBatchServer(origin) as server:
        server.hold.clear()
        first = spec(server.origin, provider="anthropic").load(torch.device("cpu"))
        batch_id, refused = first.submit_batch(rows)
        keys = [key for key, _ in rows]
        assert batch_id == "msgbatch_1" and not refused and first.collect_batch(batch_id, keys) is None
        first.close()
        server.hold.set()
        second = spec(server.origin, provider="anthropic").load(torch.device("cpu"))
        deadline = time.monotonic() + 60
        while (outcomes := second.collect_batch(batch_id, keys)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        second.close()
    assert server.creates == 1 and outcomes is not None
    assert [outcomes[f"k{i}"]["generated_text"] for i in range(5)] == [o["generated_text"] for o in direct]
    long = outcomes["long"]
    assert isinstance(long, InputError) and "batch msgbatch_1 request errored" in str(long)


def test_max_concurrency_bounds_a_process_whichever_threads_send_windows(origin: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with FaultProxy(origin, lambda number, body: "slow", slow_s=0.3) as proxy:
        model = spec(f"{proxy.origin}/v1", max_concurrency=3).load(torch.device("cpu"))
        try:
            with ThreadPoolExecutor(2) as pool:
                windows = list(pool.map(model.score_window, [TEXTS[:8], TEXTS[8:16]]))
        finally:
            model.close()
    assert all(isinstance(o, dict) for window in windows for o in window)
    assert proxy.peak == 3, "three requests in flight at most, and three reached"


def test_a_killed_run_resumed_requests_only_the_rows_it_had_not_committed(origin: str, tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import sqlalchemy as sa
    from flow_data import execute, make_docs

    url = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = make_docs(url, 96, bad=False)
    child = Path(__file__).with_name("endpoint_run_child.py")
    here = Path(__file__).parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")]),
    }
    with FaultProxy(origin, lambda number, body: "slow", slow_s=0.3) as proxy:
        command = [sys.executable, str(child), url, f"{proxy.origin}/v1", "killed"]
        first = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        committed = 0
        while committed < 32 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
            try:
                committed = execute(url, "select count(*) from gen")[0][0]
            except sa.exc.OperationalError:
                committed = 0  # the results table is not made yet
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert 32 <= committed < len(rows), "killed mid-run, after two chunks"
        done = {str(k) for (k,) in execute(url, "select source_key from gen")}
        done |= {str(k) for (k,) in execute(url, "select source_key from shardwise_errors")}
        sent_before = sum(proxy.counts.values())
        proxy.plan = lambda number, body: "pass"
        resumed = subprocess.run([*command, "resume"], env=env, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        sent_after = sum(proxy.counts.values()) - sent_before
    print(f"\nkilled after {len(done)} rows committed, {sent_before} requests; the resume sent {sent_after}")
    assert sent_after == len([k for k, _ in rows if str(k) not in done]), (
        "committed rows were not asked again"
    )
    stored = execute(url, "select source_key, generated_text from gen order by source_key")
    dead = {str(k) for (k,) in execute(url, "select distinct source_key from shardwise_errors")}
    assert len(stored) + len(dead) == len(rows) and len({k for k, _ in stored}) == len(stored)
    clean, _ = scored(spec(f"{origin}/v1"), [text for _, text in rows])
    want = {k: o["generated_text"] for (k, _), o in zip(rows, clean, strict=True) if isinstance(o, dict)}
    assert {int(k): text for k, text in stored} == want


@pytest.mark.parametrize(
    ("model", "key", "said"),
    [
        (f"openai:{SERVED_NAME}", "sk-wrong-key-value", "refused"),
        ("openai:no-such-model", API_KEY, "no-such-model"),
    ],
)
def test_a_refused_key_or_an_unknown_model_is_one_line_before_anything_runs(
    origin: str, tmp_path, model: str, key: str, said: str, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    import sqlalchemy as sa
    from flow_data import make_docs

    from shardwise.flows.cli import main

    monkeypatch.setenv(KEY_REFERENCE.removeprefix("env:"), key)
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    make_docs(url, 5, bad=False)
    argv = ["run", "--source", url, "--table", "docs", "--model", model, "--api-base", f"{origin}/v1",
            "--api-key", KEY_REFERENCE]  # fmt: skip
    assert main(argv) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "sk-wrong" not in err and API_KEY not in err, err
    engine = sa.create_engine(url)
    tables = sa.inspect(engine).get_table_names()
    engine.dispose()
    assert "shardwise_runs" not in tables, "nothing ran: no ledger was even made"
