"""``--batch-api``: a run's windows as provider batches, each recorded in the ledger before the run waits.

The Batch API's lifecycle has no open-source server, so :class:`BatchServer`
stands in at the protocol boundary (OpenAI's Files and Batches endpoints) and
runs every line against a real ``vllm serve`` on loopback; the ledger is a
real SQLite file. The slow tests share one server for the module (30-90 s to
start); the bad-input tests need none.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
import tblib.pickling_support
import torch
from endpoint_servers import (
    API_KEY,
    KEY_REFERENCE,
    SERVED_NAME,
    AnthropicBatchServer,
    BatchServer,
    resolver,
)
from flow_data import execute, make_docs

from shardwise.errors import ConfigError, InputError, OutputError
from shardwise.model.generation import GenerationSettings
from shardwise.model.recorded import ProviderBatch, WindowRef
from shardwise.models import get_spec
from shardwise.models.endpoints import EndpointOptions, EndpointSpec
from shardwise.models.endpoints.batches import BatchLost
from shardwise.pipeline.batch_book import LedgerBook
from shardwise.results import Ledger
from shardwise.retry_policy import Outage, RetryPolicy

pytestmark = pytest.mark.xdist_group("vllm-serve")  # one vllm serve at a time

GREEDY = GenerationSettings(max_new_tokens=8)
TEXTS = [f"row {i}: the provider batch is collected {i % 5} times at most once" for i in range(12)]


def test_batch_api_with_an_embeddings_model_exits_2_in_one_line(tmp_path, capfd) -> None:
    from shardwise.flows.cli import main

    url = f"sqlite:///{tmp_path / 'docs.db'}"
    make_docs(url, 3, bad=False)
    argv = ["run", "--source", url, "--table", "docs", "--model", "openai-embed:text-embedding-3-small",
            "--batch-api", "--api-key", KEY_REFERENCE]  # fmt: skip
    assert main(argv) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--batch-api" in err and "embeddings model" in err and "drop --batch-api" in err, err
    assert "shardwise_runs" not in sa.inspect(sa.create_engine(url)).get_table_names()


def test_batch_api_is_refused_for_embeddings_and_plain_completions_by_the_specs_too() -> None:
    batch = EndpointOptions(batch_api=True)
    with pytest.raises(ConfigError, match="embeddings model; drop --batch-api"):
        get_spec("openai-embed:e").configured(batch)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"plain completions \(chat off\)"):
        EndpointSpec("openai", "m", batch, GenerationSettings(chat="off"))


def test_batch_api_leaves_the_model_version_alone() -> None:
    """Batch or online, it is the same model with the same request body: the same version, so a run
    started online may resume with --batch-api and the other way round."""
    online = EndpointSpec("openai", "m", EndpointOptions(api_base="http://h/v1"))
    batch = online.configured(EndpointOptions(api_base="http://h/v1", batch_api=True, batch_poll_s=1))
    assert online.describe().version == batch.describe().version


def test_a_batch_api_run_is_priced_at_the_providers_batch_prices() -> None:
    """A run's chunks are priced from the model's description: with --batch-api at the price table's
    batch prices (half OpenAI's online prices for gpt-4o-mini)."""
    from shardwise.cost.prices import Pricing

    online = EndpointSpec("openai", "gpt-4o-mini", EndpointOptions(api_base="http://h/v1"))
    batch = online.configured(EndpointOptions(api_base="http://h/v1", batch_api=True))
    assert (online.describe().batch_priced, batch.describe().batch_priced) == (False, True)
    row = {"prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 0}
    prices = [Pricing(s.name, batch=s.describe().batch_priced).cost([row], 0.0) for s in (online, batch)]
    assert prices[0] is not None and prices[1] == pytest.approx(prices[0] / 2)


def test_a_window_with_a_key_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="key 'a' appears twice in one window"):
        WindowRef(0, ("a", "b", "a"), book=None)  # type: ignore[arg-type]


# The rest run against the real server.


@pytest.fixture(scope="module")
def origin(llama_origin: str) -> str:
    """The worker's ``vllm serve`` of the tiny Llama (tests/models/conftest.py)."""
    return llama_origin


def spec(base: str, **options) -> EndpointSpec:
    opened = get_spec(f"openai:{SERVED_NAME}")
    assert isinstance(opened, EndpointSpec)
    given = EndpointOptions(api_base=base, api_key=KEY_REFERENCE, **options)
    return opened.configured(given).generating(GREEDY).resolving(resolver)


def online(origin: str, texts: list[object]) -> list[object]:
    model = spec(f"{origin}/v1").load(torch.device("cpu"))
    try:
        return list(model.score_window(texts))
    finally:
        model.close()


@pytest.fixture
def book(sqlite_url: str):
    with Ledger(sqlite_url) as ledger:
        ledger.ensure()
        yield LedgerBook(ledger, "run-1", 0, 0, Outage(RetryPolicy()))


@pytest.mark.slow
def test_a_batch_api_run_ends_exact_with_its_batch_ids_in_the_ledger(
    origin: str, tmp_path, prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardwise.flows.cli import main

    monkeypatch.setenv(KEY_REFERENCE.removeprefix("env:"), API_KEY)
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = make_docs(url, 200)  # and three bad rows: a null and two blank texts
    common = ["run", "--source", url, "--table", "docs", "--model", f"openai:{SERVED_NAME}",
              "--api-key", KEY_REFERENCE, "--progress", "none", "--shards", "4",
              "--max-new-tokens", "8"]  # fmt: skip
    assert main([*common, "--api-base", f"{origin}/v1", "--results-table", "online"]) == 0
    with BatchServer(origin) as server:
        started = time.monotonic()
        batch = ["--api-base", f"{server.origin}/v1", "--results-table", "batched", "--batch-api",
                 "--batch-poll-interval", "0.2"]  # fmt: skip
        assert main([*common, *batch]) == 0
        batch_s = time.monotonic() - started
        lines_run = server.lines_run

    texts = {
        table: dict(execute(url, f"select source_key, generated_text from {table}"))
        for table in ("online", "batched")
    }
    dead = dict(
        execute(url, "select source_key, message from shardwise_errors where results_table like '%batched'")
    )
    assert texts["batched"] == texts["online"] and len(texts["batched"]) >= 190
    assert set(map(str, texts["batched"])) | set(dead) == {str(k) for k, _ in rows}
    assert not set(map(str, texts["batched"])) & set(dead), "a row or a dead letter per source row"
    tokens = execute(url, "select min(prompt_tokens), min(completion_tokens) from batched")[0]
    assert tokens[0] > 0 and tokens[1] > 0
    (run_id,) = execute(url, "select distinct run_id from batched")[0]
    recorded = execute(
        url,
        "select shard_id, position, batch_id, status, rows_sent from shardwise_provider_batches "
        "where run_id = :r order by shard_id, position",
        {"r": run_id},
    )
    assert len(recorded) == server.creates == 4, recorded  # a window (and a batch) per shard
    assert {row[2] for row in recorded} == set(server.batches)
    assert {row[3] for row in recorded} == {"completed"}
    assert sum(row[4] for row in recorded) == len(texts["batched"]) + len(
        [m for m in dead.values() if "batch" in m]
    ), "every row sent once, in one batch"
    print(
        f"\n--batch-api: {len(rows)} rows in {batch_s:.1f} s ({len(rows) / batch_s:.1f} rows/s), "
        f"{server.creates} batches created, {lines_run} lines run, {len(dead)} dead letters"
    )


@pytest.mark.slow
def test_a_run_killed_while_its_first_batch_runs_resumes_without_submitting_it_again(
    origin: str, tmp_path
) -> None:
    url = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = make_docs(url, 64, bad=False)  # four windows of 16 rows: four batches
    child = Path(__file__).with_name("endpoint_run_child.py")
    here = Path(__file__).parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")]),
    }
    with BatchServer(origin) as server:
        server.hold.clear()  # the first batch runs its lines, and does not end while the run waits on it
        command = [sys.executable, str(child), url, f"{server.origin}/v1", "killed"]
        first = subprocess.Popen([*command, "batch-api"], env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        recorded: list[tuple[object, ...]] = []
        while not recorded and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.2)
            try:
                recorded = execute(url, "select batch_id, status from shardwise_provider_batches")
            except sa.exc.OperationalError:
                recorded = []  # the ledger is not made yet
        time.sleep(1.0)  # the run is polling its batch now
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert recorded == [("batch-1", "submitted")], "killed while it waited on its first batch"
        creates_before = server.creates
        assert execute(url, "select count(*) from shardwise_chunks")[0][0] == 0, "nothing was committed"

        server.hold.set()
        resumed = subprocess.run(
            [*command, "resume", "batch-api"], env=env, capture_output=True, text=True, timeout=300
        )
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        creates_after = server.creates
        lines_run = server.lines_run
    print(
        f"\nkilled after {creates_before} batch created; all told {creates_after} batches created for 4 "
        f"windows, {lines_run} lines run for {len(rows)} rows"
    )
    assert creates_before == 1 and creates_after == 4, "batch-1 was collected, never submitted again"
    assert lines_run == len(rows), "no row was sent twice"
    stored = execute(url, "select source_key, generated_text from gen")
    dead = execute(url, "select source_key from shardwise_errors")
    assert len(stored) + len(dead) == len(rows) and len({k for k, _ in stored}) == len(stored)
    batches = execute(url, "select batch_id, status from shardwise_provider_batches order by position")
    assert batches == [(f"batch-{i}", "completed") for i in range(1, 5)]
    clean = online(origin, [text for _, text in rows])
    want = {k: o["generated_text"] for (k, _), o in zip(rows, clean, strict=True) if isinstance(o, dict)}
    assert {int(k): text for k, text in stored} == want


@pytest.mark.slow
def test_lines_that_errored_or_expired_are_dead_letters_with_the_providers_reason(
    origin: str, book: LedgerBook
) -> None:
    values: list[object] = [TEXTS[0], "word " * 2000, None, *TEXTS[1:6]]
    keys = tuple(f"k{i}" for i in range(len(values)))
    clean = online(origin, TEXTS[:6])
    with BatchServer(origin, expire_after=4) as server:  # the batch expires after its first four lines
        model = spec(f"{server.origin}/v1", batch_api=True, batch_poll_s=0.1).load(torch.device("cpu"))
        try:
            outcomes = model.score_recorded(values, WindowRef(0, keys, book))
            again = model.score_recorded(values, WindowRef(0, keys, book))  # a retried window
        finally:
            model.close()
    assert server.creates == 1, "the retried window collected the recorded batch"
    assert [str(o) for o in again] == [str(o) for o in outcomes]
    by_key = dict(zip(keys, outcomes, strict=True))
    assert by_key["k0"]["generated_text"] == clean[0]["generated_text"]  # type: ignore[index]
    assert by_key["k3"]["generated_text"] == clean[1]["generated_text"]  # type: ignore[index]
    assert by_key["k4"]["generated_text"] == clean[2]["generated_text"]  # type: ignore[index]
    assert isinstance(by_key["k1"], InputError) and "batch batch-1 line failed (400)" in str(by_key["k1"])
    assert isinstance(by_key["k2"], InputError) and "batch" not in str(by_key["k2"])  # never sent: null
    for key in ("k5", "k6", "k7"):
        assert isinstance(by_key[key], InputError)
        assert str(by_key[key]) == "batch batch-1 ended expired before this row ran"
    (stored,) = book.ledger.provider_batches("run-1")
    assert (stored.batch.batch_id, stored.batch.status, stored.batch.rows_sent) == ("batch-1", "expired", 7)
    assert stored.first_key == "k0" and stored.position == 0 and stored.ended_at is not None


@pytest.mark.slow
def test_a_batch_the_provider_lost_fails_in_one_line_and_the_next_attempt_submits_its_rows_again(
    origin: str, book: LedgerBook
) -> None:
    keys = tuple(f"k{i}" for i in range(3))
    window = WindowRef(0, keys, book)
    clean = online(origin, TEXTS[:3])
    with BatchServer(origin) as server:
        model = spec(f"{server.origin}/v1", batch_api=True, batch_poll_s=0.1).load(torch.device("cpu"))
        try:
            first = model.score_recorded(TEXTS[:3], window)
            server.lose("batch-1")  # the provider no longer knows the recorded batch
            with pytest.raises(BatchLost) as lost:
                model.score_recorded(TEXTS[:3], window)  # a retried window looks at the recorded batch
            (stored,) = book.ledger.provider_batches("run-1")
            assert (stored.batch.batch_id, stored.batch.status) == ("batch-1", "lost")
            again = model.score_recorded(TEXTS[:3], window)  # the next attempt, as --resume runs it
        finally:
            model.close()
    message = str(lost.value)
    assert len(message.splitlines()) == 1 and API_KEY not in message
    assert "provider batch batch-1 (3 rows) is not found at" in message and "404" in message, message
    assert "--resume submits its rows again in a new batch" in message
    assert pickle.loads(pickle.dumps(lost.value)).args == lost.value.args  # it crosses from a worker
    # as a Dask worker pickles it: importing distributed has tblib pickle every error class then known
    # with its __context__, and the SDK's errors, imported later, do not unpickle
    tblib.pickling_support.install(BatchLost)
    assert pickle.loads(pickle.dumps(lost.value)).args == lost.value.args
    assert server.creates == 2, "one new batch for the lost one, no more"
    texts = [o["generated_text"] for o in clean]  # type: ignore[index]
    assert [o["generated_text"] for o in first] == texts == [o["generated_text"] for o in again]  # type: ignore[index]
    (stored,) = book.ledger.provider_batches("run-1")
    assert (stored.batch.batch_id, stored.batch.status) == ("batch-2", "completed")


class _KilledBeforeRecording(Exception):
    """Stands for the process dying between the provider accepting a batch and the ledger's commit."""


@dataclass(frozen=True)
class _BookThatDiesOnce:
    """A ledger book whose first record never happens, as if the process were killed before it."""

    book: LedgerBook
    died: list[str]

    def recorded(self, window: WindowRef) -> list[ProviderBatch]:
        return self.book.recorded(window)

    def record(self, window: WindowRef, batch: ProviderBatch) -> None:
        if not self.died:
            self.died.append(batch.batch_id)
            raise _KilledBeforeRecording(batch.batch_id)
        self.book.record(window, batch)

    def ended(self, window: WindowRef, batch_index: int, status: str) -> None:
        self.book.ended(window, batch_index, status)

    def label(self, window: WindowRef, batch_index: int) -> str:
        return self.book.label(window, batch_index)

    def waiting(self, window: WindowRef) -> None:
        self.book.waiting(window)


@pytest.mark.slow
def test_a_batch_accepted_and_never_recorded_is_found_by_its_label_not_submitted_again(
    origin: str, book: LedgerBook
) -> None:
    keys = ("a", "b", "c")
    dying = _BookThatDiesOnce(book, [])
    clean = online(origin, TEXTS[:3])
    with BatchServer(origin) as server:
        model = spec(f"{server.origin}/v1", batch_api=True, batch_poll_s=0.1).load(torch.device("cpu"))
        try:
            with pytest.raises(_KilledBeforeRecording):
                model.score_recorded(TEXTS[:3], WindowRef(0, keys, dying))
            assert book.ledger.provider_batches("run-1") == [], "the id was never recorded"
            outcomes = model.score_recorded(TEXTS[:3], WindowRef(0, keys, dying))  # the next attempt
        finally:
            model.close()
    assert server.creates == 1, "the accepted batch was found by its label, not submitted again"
    assert server.batches["batch-1"]["metadata"] == {
        "shardwise_batch": book.label(WindowRef(0, keys, book), 0)
    }
    assert [o["generated_text"] for o in outcomes] == [o["generated_text"] for o in clean]  # type: ignore[index]
    (stored,) = book.ledger.provider_batches("run-1")
    assert (stored.batch.batch_id, stored.batch.status) == ("batch-1", "completed")


@pytest.mark.slow
def test_a_failed_batch_names_the_providers_reason_in_each_rows_dead_letter(
    origin: str, book: LedgerBook
) -> None:
    reason = "The input file has an invalid JSON line"
    with BatchServer(origin, fail_with=reason) as server:
        model = spec(f"{server.origin}/v1", batch_api=True, batch_poll_s=0.1).load(torch.device("cpu"))
        try:
            outcomes = model.score_recorded(TEXTS[:2], WindowRef(0, ("a", "b"), book))
        finally:
            model.close()
    want = f"batch batch-1 ended failed (invalid_request: {reason} (line 1)) before this row ran"
    assert [str(o) for o in outcomes] == [want, want]
    assert server.lines_run == 0
    (stored,) = book.ledger.provider_batches("run-1")
    assert stored.batch.status == "failed"


@pytest.mark.slow
def test_a_row_answered_twice_or_unreadably_in_a_batch_is_a_dead_letter_saying_so(
    origin: str, book: LedgerBook
) -> None:
    def tamper(records: list[bytes]) -> list[bytes]:
        by_key = {json.loads(r)["custom_id"]: r for r in records}
        second = json.loads(by_key["k0"])
        second["response"]["body"]["choices"][0]["message"]["content"] = "another answer"
        broken = json.loads(by_key["k1"])
        broken["response"]["body"] = {"object": "chat.completion"}
        return [by_key["k0"], json.dumps(second).encode(), json.dumps(broken).encode(), by_key["k2"],
                b"not json"]  # fmt: skip

    keys = ("k0", "k1", "k2")
    clean = online(origin, TEXTS[:3])
    with BatchServer(origin, tamper=tamper) as server:
        model = spec(f"{server.origin}/v1", batch_api=True, batch_poll_s=0.1).load(torch.device("cpu"))
        try:
            outcomes = dict(zip(keys, model.score_recorded(TEXTS[:3], WindowRef(0, keys, book)), strict=True))
        finally:
            model.close()
    twice = outcomes["k0"]
    assert isinstance(twice, InputError), twice
    assert str(twice) == (
        "batch batch-1 holds 2 result lines for this row (custom_id 'k0'); which one is its answer cannot "
        "be told, so none is kept"
    )
    unreadable = outcomes["k1"]
    assert isinstance(unreadable, OutputError), unreadable
    assert str(unreadable).startswith("batch batch-1 line: the answer (status 200) is not a chat completion")
    assert outcomes["k2"]["generated_text"] == clean[2]["generated_text"]  # type: ignore[index]


@pytest.mark.slow
def test_a_batch_past_the_completion_window_leaves_its_rows_dead_letters(
    origin: str, book: LedgerBook
) -> None:
    keys = ("a", "b")
    with BatchServer(origin) as server:
        server.hold.clear()  # it never ends
        model = spec(f"{server.origin}/v1", batch_api=True, batch_poll_s=0.1).load(torch.device("cpu"))
        model.completion_window_s = 1.0  # the providers' 24 hours, shortened
        try:
            outcomes = model.score_recorded(TEXTS[:2], WindowRef(0, keys, book))
        finally:
            model.close()
    assert len(outcomes) == len(keys)
    assert all(isinstance(o, InputError) and "24-hour completion window" in str(o) for o in outcomes)
    (stored,) = book.ledger.provider_batches("run-1")
    assert stored.batch.status == "timed out"


@pytest.mark.slow
def test_anthropic_message_batches_record_and_collect_a_window_the_same_way(
    origin: str, book: LedgerBook
) -> None:
    keys = tuple(f"k{i}" for i in range(4))
    direct = EndpointOptions(api_base=origin, api_key=KEY_REFERENCE)  # vLLM serves /v1/messages too
    anthropic = EndpointSpec("anthropic", SERVED_NAME, direct, GREEDY).resolving(resolver)
    model = anthropic.load(torch.device("cpu"))
    try:
        clean = list(model.score_window(TEXTS[:4]))
    finally:
        model.close()
    with AnthropicBatchServer(origin) as server:
        options = EndpointOptions(
            api_base=server.origin, api_key=KEY_REFERENCE, batch_api=True, batch_poll_s=0.1
        )
        model = anthropic.configured(options).load(torch.device("cpu"))
        try:
            outcomes = model.score_recorded(TEXTS[:4], WindowRef(0, keys, book))
            model.score_recorded(TEXTS[:4], WindowRef(0, keys, book))  # found recorded: collected again
        finally:
            model.close()
    assert server.creates == 1
    assert [o["generated_text"] for o in outcomes] == [o["generated_text"] for o in clean]  # type: ignore[index]
    (stored,) = book.ledger.provider_batches("run-1")
    assert (stored.batch.provider, stored.batch.batch_id, stored.batch.status) == (
        "anthropic",
        "msgbatch_1",
        "ended",
    )


@pytest.mark.slow
def test_a_worker_told_to_stop_lets_the_shard_go_while_it_waits_and_the_next_attempt_collects(
    origin: str, book: LedgerBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from shardwise.errors import WorkerPreempted
    from shardwise.pipeline import preemption

    told = threading.Event()
    monkeypatch.setattr(preemption, "_draining", told)  # what SIGTERM sets in a draining worker
    keys = ("a", "b", "c")
    with BatchServer(origin) as server:
        server.hold.clear()
        model = spec(f"{server.origin}/v1", batch_api=True, batch_poll_s=0.1).load(torch.device("cpu"))
        try:
            told.set()
            with pytest.raises(WorkerPreempted, match="shard 0 was let go"):
                model.score_recorded(TEXTS[:3], WindowRef(0, keys, book))
            assert [b.status for b in book.recorded(WindowRef(0, keys, book))] == ["submitted"]
            told.clear()
            server.hold.set()
            outcomes = model.score_recorded(TEXTS[:3], WindowRef(0, keys, book))  # the next attempt
        finally:
            model.close()
    assert server.creates == 1 and len(outcomes) == len(keys) and all(isinstance(o, dict) for o in outcomes)
