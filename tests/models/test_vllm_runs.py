"""``shardwise run --engine vllm`` end to end, on the tiny vLLM-ready model: the issue's "done when" on a CPU.

The same rows go through ``--engine vllm`` and ``--engine hf`` into a SQL table and into a Delta table: the
same rows stored, the same dead letters for the same reasons, every lineage column filled; greedy text
equal to the hf engine's on nearly every row. ``--json-schema`` rows are valid or dead letters naming the
schema. A run SIGKILLed mid-shard resumes exactly (sampled, seeded per row, and one row at a time with no
prefix cache: vLLM does not promise batch-invariant decoding, so only then is a row's text independent of
what ran beside it), and ``--only-new`` then generates nothing. ``bench/generate.py --engine vllm``
prints the JSON its readers take. The runs in this process share one
engine (the same model and engine options); the killed run builds its own in its own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil
import pytest
from flow_data import BAD_ROWS, LINEAGE, execute, make_docs
from spec_builder import flat_spec
from vllm_lm import ENGINE_OPTIONS, need_vllm, vllm_lm, vllm_settings

from shardwise.flows.cli import main
from shardwise.model.generation import GenerationSettings
from shardwise.models.hf.causal.model import HFCausalSpec
from shardwise.models.vllm.engines import shutdown_all
from shardwise.pipeline.destination import results_place
from shardwise.sinks import Layout

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm")]  # one vLLM engine at a time
ROWS = 24
OPTIONS = [f"--engine-option={name}={value}" for name, value in ENGINE_OPTIONS.items()]
COUNTED = Path(__file__).resolve().parents[1] / "flows" / "counted_cli.py"
KILL_ROWS, CHUNK, ROWS_PER_S = 48, 8, 8  # 6 s of paced generating once the engine is up: killed mid-shard
SAMPLING = ("--temperature", "0.9", "--top-p", "0.95", "--seed", "7")
EXACT = ("--engine-option", "max_num_seqs=1", "--engine-option", "enable_prefix_caching=false")
"""What docs/how-to/vllm.md names for texts equal between runs on a CPU: each row computed alone, in full."""
SYSTEM = "You answer questions about Python libraries. " * 8
"""A system text of more than one of vLLM's CPU cache blocks (128 tokens): its prefix cache serves it."""


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    need_vllm()
    yield vllm_lm(tmp_path_factory.mktemp("vllm-lm"))
    shutdown_all()


def _argv(source: str, lm: Path, engine: str, *extra: str, progress: str = "none") -> list[str]:
    options = OPTIONS if engine == "vllm" else ["--precision", "fp32"]
    return [
        "run", "--source", source, "--table", "docs", "--model", str(lm), "--prompt", "Q: {text}",
        "--chat", "off", "--max-new-tokens", "6", "--shards", "2", "--engine", engine, *options,
        "--progress", progress, *extra,
    ]  # fmt: skip


def _sink_rows(source: str, results: str, table: str, fmt: str | None, lm: Path) -> dict[int, dict]:
    """A results table's rows by source key, read through its sink; a key stored twice fails."""
    spec = flat_spec(source=source, results=results, results_table=table, results_format=fmt)  # type: ignore[arg-type]
    settings = vllm_settings() if "vllm" in table else GenerationSettings()  # vllm adds cached_tokens
    outputs = HFCausalSpec(lm, generation=settings).describe().outputs
    sink = results_place(spec, results).open(Layout(outputs, "int"))
    try:
        rows = sink.read()
    finally:
        sink.close()
    keyed = {int(r["source_key"]): dict(r) for r in rows}
    assert len(keyed) == len(rows), "a key was stored twice"
    return keyed


def _dead(source: str, table: str) -> dict[int, str]:
    query = "select source_key, error_class, message, results_table from shardwise_errors"
    # a table in a lake is recorded as FORMAT:LOCATION/TABLE, one in a database by its name
    found = [row[:3] for row in execute(source, query) if row[3] == table or row[3].endswith(f"/{table}")]
    assert len(found) == len({k for k, *_ in found}), "a dead letter was stored twice"
    return {int(k): f"{cls}: {message}" for k, cls, message in found}


def test_sql_and_delta_hold_what_the_hf_engine_stores_with_its_lineage_and_dead_letters(
    lm: Path, tmp_path: Path, prefect_harness: None
) -> None:
    source = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = make_docs(source, ROWS)
    lake = str(tmp_path / "lake")
    stored: dict[tuple[str, str], dict[int, dict]] = {}
    for engine in ("vllm", "hf"):
        sql, delta = f"sql_{engine}", f"delta_{engine}"
        exact = EXACT if engine == "vllm" else ()  # the two runs' texts are compared below
        assert main(_argv(source, lm, engine, "--results-table", sql, *exact)) == 0
        assert main(_argv(source, lm, engine, "--results", lake, "--results-format", "delta",
                          "--results-table", delta, *exact)) == 0  # fmt: skip
        stored[engine, "sql"] = _sink_rows(source, source, sql, None, lm)
        stored[engine, "delta"] = _sink_rows(source, lake, delta, "delta", lm)
    good = {k for k, _ in rows} - {k for k, _ in BAD_ROWS}
    for (engine, sink), found in stored.items():
        assert set(found) == good, (engine, sink)
        for row in found.values():
            missing = [name for name in LINEAGE if row[name] in (None, "")]
            assert not missing, (engine, sink, missing)
            assert row["finish_reason"] in ("stop", "length") and 0 <= row["completion_tokens"] <= 6
    for engine in ("vllm", "hf"):
        sql, delta = stored[engine, "sql"], stored[engine, "delta"]
        assert {k: r["generated_text"] for k, r in sql.items()} == {
            k: r["generated_text"] for k, r in delta.items()
        }, f"{engine}: the SQL and Delta tables hold the same texts"
        assert {r["model_version"] for r in sql.values()} == {r["model_version"] for r in delta.values()}
    vllm_sql, hf_sql = stored["vllm", "sql"], stored["hf", "sql"]
    assert {r["model_version"] for r in vllm_sql.values()}.isdisjoint(
        r["model_version"] for r in hf_sql.values()
    )
    assert all(vllm_sql[k]["prompt_tokens"] == hf_sql[k]["prompt_tokens"] for k in good)
    assert all(vllm_sql[k]["input_fingerprint"] == hf_sql[k]["input_fingerprint"] for k in good)
    same = sum(vllm_sql[k]["generated_text"] == hf_sql[k]["generated_text"] for k in good)
    print(f"greedy rows equal to the hf engine's through shardwise run: {same}/{len(good)}")
    assert same >= 0.9 * len(good)
    dead = {name: _dead(source, name) for name in ("sql_vllm", "delta_vllm", "sql_hf", "delta_hf")}
    assert set(dead["sql_vllm"]) == {k for k, _ in BAD_ROWS}
    assert dead["sql_vllm"] == dead["delta_vllm"] == dead["sql_hf"] == dead["delta_hf"], "same reasons"

    again = main(_argv(source, lm, "vllm", "--results", lake, "--results-format", "delta",
                       "--results-table", "delta_vllm", "--only-new"))  # fmt: skip
    assert again == 0 and _sink_rows(source, lake, "delta_vllm", "delta", lm) == stored["vllm", "delta"]
    ((rows_out,),) = execute(source, "select rows_out from shardwise_runs order by started_at desc limit 1")
    assert rows_out == 0, "nothing is new: nothing generates"


def test_json_schema_rows_are_valid_or_dead_letters_naming_the_schema(
    lm: Path, tmp_path: Path, prefect_harness: None
) -> None:
    import jsonschema

    source = f"sqlite:///{tmp_path / 'docs.db'}"
    rows = make_docs(source, 12)
    schema = {"type": "boolean"}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    given = ["--json-schema", str(tmp_path / "schema.json"), "--max-new-tokens", "8"]
    for table, extra in (("held", []), ("free", ["--unconstrained"])):
        assert main([*_argv(source, lm, "vllm", "--results-table", table), *given, *extra]) == 0
    held = execute(source, "select source_key, generated_text, parsed from held")
    free = execute(source, "select source_key from free")
    for _, text, parsed in held:
        value = json.loads(text)
        jsonschema.validate(value, schema)
        assert json.loads(parsed) == value
    held_dead, free_dead = _dead(source, "held"), _dead(source, "free")
    good = {k for k, _ in rows} - {k for k, _ in BAD_ROWS}
    assert {int(k) for k, *_ in held} | set(held_dead) == {k for k, _ in rows}, "each row stored or dead"
    assert all(held_dead[k].startswith("OutputError: ") for k in set(held_dead) & good), held_dead
    print(f"--json-schema: {len(held)} valid rows, {len(set(held_dead) & good)} schema dead letters")
    assert len(held) >= len(good) // 2, "decoding held to the schema gives mostly valid rows"
    assert not free and set(free_dead) == {k for k, _ in rows}, "a random model's free text is no JSON"
    assert all(free_dead[k].startswith("OutputError: ") for k in good), free_dead


def test_the_plan_counts_the_prompt_tokens_a_vllm_run_counts_without_building_an_engine(
    lm: Path, tmp_path: Path, prefect_harness: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """``shardwise plan`` over an ``--engine vllm`` run counts its prompts with the generator's own chat
    rendering and tokenizer (issue 38): exactly the prompt tokens the run then records."""
    from shardwise.models.vllm.engines import engines_built

    source = f"sqlite:///{tmp_path / 'docs.db'}"
    make_docs(source, ROWS)
    argv = _argv(source, lm, "vllm", "--results-table", "planned", "--chat", "on", "--system", SYSTEM)
    at = argv.index("--progress")
    built = engines_built()
    assert main(["plan", *argv[1:at], *argv[at + 2 :], "--json"]) == 0
    plan = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert engines_built() == built, "a plan builds no vLLM engine"
    assert plan["prompt_tokens_counted"] == f"exact: every one of {ROWS + len(BAD_ROWS)} rows tokenized"
    assert main(argv) == 0
    ((prompt, scored),) = execute(source, "select sum(prompt_tokens), count(*) from planned")
    assert plan["prompt_tokens"] == prompt, "the plan counts what the vLLM run counted"
    assert plan["max_completion_tokens"] == scored * 6


VLLM_LOG = re.compile(r"\b(DEBUG|INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d")
"""A line of vLLM's log (its format: level, then month-day time)."""


def test_a_gguf_file_runs_on_vllm_from_its_kept_conversion_and_vllm_logs_stay_quiet(
    lm: Path, tmp_path: Path, prefect_harness: None
) -> None:
    """Issue 45, items 1 and 7: ``--engine vllm`` on a GGUF file (vLLM 0.32 loads none) generates from its
    kept float32 conversion, whose config vLLM takes for a plain checkpoint; the command, a process of
    its own, shows none of vLLM's INFO lines, and nothing of vLLM's on stdout."""
    from gguf_builders import write_gguf
    from hf_builders import CHAT_TEMPLATE

    from shardwise.hashing import hash_file
    from shardwise.pipeline.home import converted_cache

    gguf = write_gguf(lm, tmp_path / "gguf" / "tiny.gguf", chat_template=CHAT_TEMPLATE)
    source = f"sqlite:///{tmp_path / 'docs.db'}"
    make_docs(source, 12)
    argv = _argv(source, gguf, "vllm", "--results-table", "from_gguf")
    command = [sys.executable, "-c", "from shardwise.flows.cli import entry; entry()", *argv]
    env = {**os.environ, "PREFECT_API_URL": _api_url()}
    env.pop("VLLM_LOGGING_LEVEL", None)  # as a user's shell has it: the command's own default decides
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not VLLM_LOG.search(done.stdout), done.stdout
    assert not [line for line in done.stderr.splitlines() if "INFO" in line and VLLM_LOG.search(line)]
    (entry,) = [e for e in converted_cache().entries() if e.key["file"] == hash_file(gguf)]  # type: ignore[union-attr]
    assert "quantization_config" not in json.loads((entry.path / "config.json").read_text())
    assert main(_argv(source, lm, "vllm", "--results-table", "from_dir")) == 0
    query = "select source_key, generated_text from {} order by source_key"
    from_gguf = execute(source, query.format("from_gguf"))
    assert len(from_gguf) == 12 and from_gguf == execute(source, query.format("from_dir"))


def _api_url() -> str:
    """The test harness's Prefect API, for a command run as a process of its own."""
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


def _kill_at_a_quarter(source: str, lm: Path, counts: Path) -> tuple[int, list[psutil.Process]]:
    """The run under counted_cli.py in its own process (its own engine); SIGKILLed once its progress
    shows a quarter of the rows. Returns the rows its progress showed, and the processes it had started
    (its vLLM engine's)."""
    env = {**os.environ, "COUNTED_CHUNK_ROWS": str(CHUNK), "PREFECT_API_URL": _api_url()}
    extra = ("--results-table", "resumed", *SAMPLING, *EXACT, "--shards", "1", "--lease-s", "2")
    argv = _argv(source, lm, "vllm", *extra, "--progress-every", "0.2", progress="lines")
    proc = subprocess.Popen(
        [sys.executable, str(COUNTED), str(counts), str(ROWS_PER_S), *argv],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    shown, tail, children = 0, [], []
    for line in proc.stderr:
        tail = [*tail[-20:], line]
        done = re.search(r"progress: 0/1 shard, ([\d,]+)/([\d,]+) rows", line)
        if done and 4 * int(done.group(1).replace(",", "")) >= int(done.group(2).replace(",", "")):
            shown = int(done.group(1).replace(",", ""))
            children = psutil.Process(proc.pid).children(recursive=True)
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert shown and proc.returncode == -signal.SIGKILL, "not killed mid-shard:\n" + "".join(tail)
    return shown, children


def _ended(processes: list[psutil.Process]) -> list[psutil.Process]:
    """What of ``processes`` (a killed run's children: its vLLM engine's, its guard) still runs once its
    guard has had time to act. vLLM 0.32's engine process outlives a SIGKILLed parent on its own (it
    waits on its socket, holding its memory); the guard of :mod:`shardwise.process.reaper` that
    Shardwise starts beside its first engine kills it. Anything left is killed here, and returned."""
    _, alive = psutil.wait_procs(processes, timeout=15)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    return alive


def test_a_run_killed_mid_shard_resumes_exactly_and_only_new_then_generates_nothing(
    lm: Path, tmp_path: Path, prefect_harness: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardwise.models.vllm import VllmGenerator

    source = f"sqlite:///{tmp_path / 'docs.db'}"
    make_docs(source, KILL_ROWS)
    counts = tmp_path / "killed.counts"
    shown, left = _kill_at_a_quarter(source, lm, counts)
    assert left, "the killed run had started its engine's process"
    assert not _ended(left), "the killed run's vLLM engine process outlived it"
    generated = sum(int(n) for n in counts.read_text().split())
    ((run_id, status),) = execute(source, "select run_id, status from shardwise_runs")
    ((committed,),) = execute(source, "select count(*) from resumed")
    assert status == "running" and committed % CHUNK == 0 and CHUNK <= committed < KILL_ROWS, committed
    time.sleep(2.5)  # its lease (--lease-s 2) runs out: the run is abandoned, and a resume may take it

    # The resume is a command of its own, counted as the killed one was: it must also exit once done
    # (Python's exit waits on vLLM's engine process, which Shardwise shuts down then).
    resume = _argv(source, lm, "vllm", "--results-table", "resumed", *SAMPLING, *EXACT, "--shards", "1")
    env = {**os.environ, "COUNTED_CHUNK_ROWS": str(CHUNK), "PREFECT_API_URL": _api_url()}
    again = tmp_path / "resumed.counts"
    done = subprocess.run(
        [sys.executable, str(COUNTED), str(again), "0", *resume, "--resume", run_id],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    resumed_rows = sum(int(n) for n in again.read_text().split())

    asked: list[int] = []
    score = VllmGenerator.score_window

    def counted(self: VllmGenerator, values: Any) -> Any:
        outcomes = score(self, values)
        asked.append(sum(isinstance(o, Mapping) for o in outcomes))  # rows generated, not dead letters
        return outcomes

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VllmGenerator, "score_window", counted)
        clean_argv = _argv(source, lm, "vllm", "--results-table", "clean", *SAMPLING, *EXACT, "--shards", "1")
        assert main(clean_argv) == 0
        asked.clear()
        assert main([*resume, "--only-new"]) == 0
    print(
        f"\nkilled at {shown} rows shown; {generated} generated, {committed} committed; the resume "
        f"generated {resumed_rows}"
    )
    assert resumed_rows == KILL_ROWS - committed, "the resume generated only what no chunk had committed"
    assert sum(asked) == 0, "--only-new: nothing is new, nothing generates"
    columns = "source_key, generated_text, finish_reason, prompt_tokens, completion_tokens, input_fingerprint"
    resumed, clean = (
        execute(source, f"select {columns} from {t} order by source_key") for t in ("resumed", "clean")
    )
    assert len(resumed) == len({r[0] for r in resumed}) == KILL_ROWS
    assert resumed == clean, "the resumed table equals an uninterrupted run's, column for column"
    assert len({r[1] for r in resumed}) > KILL_ROWS // 2, "sampling gave varied texts"
    letters = execute(source, "select source_key from shardwise_errors where run_id = :r", {"r": run_id})
    assert sorted(int(k) for (k,) in letters) == [k for k, _ in BAD_ROWS], "each dead letter once"
    ((rows_in, rows_out, done),) = execute(
        source, "select rows_in, rows_out, status from shardwise_runs where run_id = :r", {"r": run_id}
    )
    assert (rows_in, rows_out, done) == (KILL_ROWS + len(BAD_ROWS), KILL_ROWS, "completed")


def test_the_generation_bench_compares_the_vllm_engine_with_bare_vllm_and_the_hf_engine(
    lm: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``bench/generate.py --engine vllm`` on a few rows, in this process (it finds this module's engine):
    its stdout is the JSON the issue asks for and nothing else (issue 45: not vLLM's logs either), and
    the same engine gives bare vLLM the same prompts."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ is not installed
    from bench import generate

    options = [f"--engine-option={name}={value}" for name, value in ENGINE_OPTIONS.items()]
    argv = ["--engine", "vllm", "--model", str(lm), "--limit", "6", "--hf-rows", "3", "--max-chars", "200"]
    result = generate.main([*argv, "--max-new-tokens", "4", "--system", SYSTEM, "--json", *options])
    out, err = capfd.readouterr()
    (line,) = out.strip().splitlines()
    last = json.loads(line)
    assert last == result and "tokens/s" in err, "the figures' lines go to stderr"
    required = {"rows", "tokens_per_s", "bare_vllm_tokens_per_s", "ratio_vs_bare_vllm", "hf_tokens_per_s"}
    required |= {"match_share_vs_bare_vllm", "match_share_vs_hf", "prefix_cache_hit_rate", "hf_rows"}
    assert required <= set(last) and set(last) == set(generate.KEYS)
    assert (last["rows"], last["hf_rows"], last["engine"], last["dtype"]) == (6, 3, "vllm", "float32")
    assert last["tokens_per_s"] > 0 and last["bare_vllm_tokens_per_s"] > 0 and last["hf_tokens_per_s"] > 0
    ratio = last["tokens_per_s"] / last["bare_vllm_tokens_per_s"]
    assert last["ratio_vs_bare_vllm"] == pytest.approx(ratio)
    assert last["bare_prompt_equal_share"] == 1.0, "vLLM's chat rendering gives Shardwise's prompt tokens"
    assert last["match_share_vs_bare_vllm"] == 1.0 and last["match_share_vs_hf"] >= 2 / 3
    assert last["prefix_cache_hit_rate"] > 0 and last["system_tokens"] > 0
