"""A run's precision: chosen once behind the guard, recorded, part of the results' version, never mixed."""

from __future__ import annotations

import logging
import re

import pytest
from flow_data import execute, make_docs
from spec_builder import flat_spec

from shardwise import precision as precision_mod
from shardwise.errors import ConfigError
from shardwise.models import get_spec
from shardwise.pipeline import RunSpec
from shardwise.results import Ledger


def _spec(url: str, **kwargs: object) -> RunSpec:
    kwargs = {"model": "tiny", **kwargs}
    return flat_spec(source=url, results=url, results_table="scores", table="docs", shards=3, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """This CPU computes bf16 natively (whatever CI's CPU is), so auto picks it."""
    monkeypatch.setattr(precision_mod, "cpu_has_native_bf16", lambda: True)


def test_auto_runs_bf16_where_native_and_loads_the_model_once(sqlite_url: str, pipeline, native_bf16) -> None:
    make_docs(sqlite_url, 90, bad=False)
    _, counts = pipeline.run(_spec(sqlite_url), "auto-bf16")
    weights = get_spec("tiny").describe().version
    record = Ledger(sqlite_url).load_run("auto-bf16")
    assert record is not None
    assert (record.precision, record.model_version) == ("bf16", f"{weights}+bf16")
    assert record.precision_agreement is not None and record.precision_agreement >= 0.999
    assert counts.rows_out == 90
    assert execute(sqlite_url, "select distinct model_version from scores") == [(f"{weights}+bf16",)]
    assert pipeline.cache.loads == 1, "the guard's load in the planner is the one the shards use"
    assert all(s.engine["model_load_s"] == 0 for s in Ledger(sqlite_url).shards("auto-bf16"))


def test_bf16_beside_fp32_gives_two_versions_never_unchanged_rows(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 60, bad=False)
    pipeline.run(_spec(sqlite_url, precision="fp32"), "full")
    planned, _ = pipeline.run(_spec(sqlite_url, precision="bf16"), "half")
    assert planned.record.precision == "bf16"
    merged = Ledger(sqlite_url).shards("half")
    assert sum(s.rows_inserted or 0 for s in merged) == 60
    assert sum(s.rows_unchanged or 0 for s in merged) == 0
    versions = execute(sqlite_url, "select model_version, count(*) from scores group by 1 order by 1")
    weights = get_spec("tiny").describe().version
    assert versions == [(weights, 60), (f"{weights}+bf16", 60)]


def test_auto_falls_back_to_fp32_with_a_warning_when_the_guard_fails(
    sqlite_url: str, pipeline, native_bf16, caplog: pytest.LogCaptureFixture
) -> None:
    make_docs(sqlite_url, 30, bad=False)
    with caplog.at_level(logging.WARNING):
        planned, counts = pipeline.run(_spec(sqlite_url, min_agreement=1.0), "strict")
    assert planned.record.precision == "fp32" and counts.rows_out == 30
    assert planned.record.precision_agreement is not None and planned.record.precision_agreement < 1.0
    assert "below the minimum 1.0: scoring in fp32" in caplog.text


def test_an_explicit_precision_that_fails_the_guard_is_refused_before_anything_runs(
    sqlite_url: str, pipeline
) -> None:
    make_docs(sqlite_url, 30, bad=False)
    with pytest.raises(
        ConfigError, match=r"in bf16 agrees with float32 to 0\.9\d+ on cpu .* use --precision fp32"
    ):
        pipeline.plan(_spec(sqlite_url, precision="bf16", min_agreement=1.0), "refused")
    assert Ledger(sqlite_url).load_run("refused") is None


def test_a_resume_keeps_the_runs_precision(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 30, bad=False)
    planned = pipeline.plan(_spec(sqlite_url, precision="bf16"), "bf16-run")
    planned.close()
    with pytest.raises(ConfigError, match="started in precision bf16; it cannot resume in fp32"):
        pipeline.plan(_spec(sqlite_url, precision="fp32", resume="bf16-run"), "x")
    resumed, counts = pipeline.run(_spec(sqlite_url, resume="bf16-run"), "bf16-run")
    assert resumed.record.precision == "bf16" and counts.rows_out == 30


def test_the_plan_line_names_shards_rows_model_and_agreement(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 30, bad=False)
    planned = pipeline.plan(_spec(sqlite_url, precision="bf16"), "described")
    planned.close()
    version = planned.model.version[:12]
    assert re.fullmatch(
        rf"3 shards over \S+ \(30 rows expected, snapshot none\); 0 already done; model tiny {version} "
        r"in bf16 \(agreement with fp32 0\.\d{5}, minimum 0\.\d+\)",
        planned.describe(),
    ), planned.describe()


def test_a_worker_whose_device_cannot_run_the_runs_precision_refuses(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 20, bad=False)
    planned = pipeline.plan(_spec(sqlite_url, precision="fp32"), "gpu-planned")
    planned.close()
    weights = get_spec("tiny").describe().version
    execute(
        sqlite_url,
        "update shardwise_runs set precision = 'fp16', model_version = :v",
        {"v": f"{weights}+fp16"},
    )
    with pytest.raises(ConfigError, match="fp16 is not computed natively on CPUs"):
        pipeline.shard(planned, 0)
    assert execute(sqlite_url, "select count(*) from scores") == [(0,)]


def test_a_later_process_reads_the_guard_from_the_calibration_cache_and_lineage_says_so(
    sqlite_url: str, native_bf16, tmp_path, caplog: pytest.LogCaptureFixture, pipeline
) -> None:
    from shardwise.precision.calibration import CalibrationCache

    local_pipeline = type(pipeline)  # LocalPipeline: `from conftest import` may find another conftest

    make_docs(sqlite_url, 30, bad=False)
    store = CalibrationCache(tmp_path / "calibration.json")
    records = []
    for run_id in ("first", "second"):  # each a fresh worker cache: a new process
        local = local_pipeline()
        local.cache.calibration = store
        try:
            with caplog.at_level(logging.INFO):
                local.run(_spec(sqlite_url), run_id)
        finally:
            local.cache.close()
        records.append(Ledger(sqlite_url).load_run(run_id))
    first, second = records
    assert first is not None and second is not None
    assert (first.precision, first.precision_agreement_from) == ("bf16", "measured")
    assert (second.precision, second.precision_agreement_from) == ("bf16", "cache")
    assert second.precision_agreement == first.precision_agreement
    assert second.model_version == first.model_version


def test_an_int8_run_records_its_precision_version_and_agreement(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 40, bad=False)
    planned, counts = pipeline.run(_spec(sqlite_url, precision="int8", device="cpu"), "int8-run")
    weights = get_spec("tiny").describe().version
    record = Ledger(sqlite_url).load_run("int8-run")
    assert record is not None
    assert (record.precision, record.model_version) == ("int8", f"{weights}+int8")
    assert record.precision_agreement is not None and 0.99 <= record.precision_agreement < 1.0
    assert record.precision_agreement_from == "measured"
    assert counts.rows_out == 40
    assert execute(sqlite_url, "select distinct model_version from scores") == [(f"{weights}+int8",)]
    assert re.search(
        r"in int8 \(agreement with fp32 0\.\d{5}, minimum 0\.99, int8 kernel [a-z0-9-]+\)$",
        planned.describe(),
    )


def test_int8_below_its_minimum_is_refused_before_the_run_exists(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 20, bad=False)
    with pytest.raises(
        ConfigError, match=r"in int8 agrees with float32 to 0\.9\d+ .* below the minimum 1\.0"
    ):
        pipeline.plan(_spec(sqlite_url, precision="int8", min_agreement=1.0), "refused-int8")
    assert Ledger(sqlite_url).load_run("refused-int8") is None


@pytest.mark.parametrize(("kernel", "warned"), [("none", True), ("avx512-vnni", False), ("amx-int8", False)])
def test_int8_on_a_cpu_without_int8_instructions_is_warned_of(
    sqlite_url: str, pipeline, monkeypatch: pytest.MonkeyPatch, kernel: str, warned: bool
) -> None:
    monkeypatch.setattr(precision_mod, "cpu_int8_kernel", lambda: kernel)
    make_docs(sqlite_url, 10, bad=False)
    planned = pipeline.plan(_spec(sqlite_url, precision="int8", device="cpu"), f"int8-{kernel}")
    planned.close()
    found = [w for w in planned.warnings() if "int8 instructions" in w]
    if warned:
        assert found == [
            "this CPU has no int8 instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8), so int8 matrix products "
            "are emulated, tens of times slower than fp32; use --precision fp32 or auto here, and int8 on a "
            "CPU that has them"
        ]
    else:
        assert found == []
    fp32 = pipeline.plan(_spec(sqlite_url, precision="fp32"), f"fp32-{kernel}")
    fp32.close()
    assert not [w for w in fp32.warnings() if "int8" in w], "only an int8 run is warned"
