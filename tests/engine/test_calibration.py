"""The calibration cache: the precision guard's figure is measured once per host and key, then read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from shardwise.precision import calibration as calibration_mod
from shardwise.precision.calibration import (
    CalibrationCache,
    calibration_key,
    device_identity,
    measured_agreement,
)
from shardwise.precision.guard import Calibration, calibrate


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The guard's measurements, counted (each returns 0.9995)."""
    calls: list[str] = []

    def fake(model, precision, pairs=False) -> Calibration:
        calls.append(precision)
        return Calibration(0.9995, {"fp32": 100.0, precision: 250.0})

    monkeypatch.setattr(calibration_mod, "calibrate", fake)
    return calls


def test_a_miss_measures_and_stores_then_a_hit_reads_it_back(
    tmp_path: Path, tiny_model, counted: list[str]
) -> None:
    store = CalibrationCache(tmp_path / "home" / "calibration.json")
    assert measured_agreement(store, tiny_model, "bf16") == (0.9995, False)
    assert measured_agreement(CalibrationCache(store.path), tiny_model, "bf16") == (0.9995, True)
    assert counted == ["bf16"], "the second process read the figure instead of measuring"
    stored = json.loads(store.path.read_text())
    (entry,) = [e for e in stored["entries"].values() if e["agreement"] is not None]  # fp32's: a speed
    assert entry["key"] == calibration_key(tiny_model, "bf16", False), "the file says what each figure is for"


@pytest.mark.parametrize(
    "changed",
    [
        {"version": "another-weights-hash"},
        {"torch": "0.0.1"},
        {"transformers": "0.0.1"},
        {"device": "cpu:x86_64:Another CPU:avx2"},
        {"precision": "fp16"},
        {"pairs": True},
        {"texts": "other-texts"},
    ],
)
def test_any_change_to_what_the_figure_depends_on_is_a_miss(
    tmp_path: Path, tiny_model, changed: dict[str, object]
) -> None:
    store = CalibrationCache(tmp_path / "calibration.json")
    key = calibration_key(tiny_model, "bf16", False)
    store.put(key, 0.9995)
    assert store.get(key) == 0.9995
    assert store.get({**key, **changed}) is None


def test_a_new_model_version_measures_again(
    tmp_path: Path, tiny_model, counted: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CalibrationCache(tmp_path / "calibration.json")
    measured_agreement(store, tiny_model, "bf16")
    monkeypatch.setattr(tiny_model, "version", "retrained-weights", raising=False)
    assert measured_agreement(store, tiny_model, "bf16") == (0.9995, False)
    assert len(counted) == 2


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe", b"[]", b'{"format": 99, "entries": {}}', b'{"format": 1, "entries": []}'],
)
def test_a_corrupt_or_foreign_file_is_ignored_and_replaced(
    tmp_path: Path, tiny_model, counted: list[str], content: bytes
) -> None:
    path = tmp_path / "calibration.json"
    path.write_bytes(content)
    store = CalibrationCache(path)
    assert measured_agreement(store, tiny_model, "bf16") == (0.9995, False)
    assert measured_agreement(store, tiny_model, "bf16") == (0.9995, True), "rewritten as a valid file"


def test_a_stored_value_that_is_not_a_number_is_a_miss(tmp_path: Path, tiny_model) -> None:
    store = CalibrationCache(tmp_path / "calibration.json")
    key = calibration_key(tiny_model, "bf16", False)
    store.put(key, 0.9995)
    stored = json.loads(store.path.read_text())
    for entry in stored["entries"].values():
        entry["agreement"] = "high"
    store.path.write_text(json.dumps(stored))
    assert store.get(key) is None


def test_an_unwritable_place_only_costs_a_measurement(tmp_path: Path, tiny_model, counted: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    store = CalibrationCache(blocker / "calibration.json")  # its folder cannot be made
    assert measured_agreement(store, tiny_model, "bf16") == (0.9995, False)
    assert measured_agreement(store, tiny_model, "bf16") == (0.9995, False)
    assert not list(tmp_path.glob(".calibration-*"))


def test_without_a_cache_every_call_measures(tiny_model, counted: list[str]) -> None:
    assert measured_agreement(None, tiny_model, "bf16") == (0.9995, False)
    assert measured_agreement(None, tiny_model, "bf16") == (0.9995, False)
    assert len(counted) == 2


def test_the_cpu_identity_names_the_flags_reduced_precision_kernels_depend_on() -> None:
    identity = device_identity(torch.device("cpu"))
    assert identity.startswith("cpu:")
    assert identity == device_identity(torch.device("cpu")), "stable within a host"


def test_a_pass_stores_each_precisions_speed_under_its_own_key(
    tmp_path: Path, tiny_model, counted: list[str]
) -> None:
    store = CalibrationCache(tmp_path / "calibration.json")
    measured_agreement(store, tiny_model, "bf16")
    bf16, fp32 = (store.speed(calibration_key(tiny_model, p, False)) for p in ("bf16", "fp32"))
    assert bf16 is not None and fp32 is not None and (bf16.cost_per_s, fp32.cost_per_s) == (250.0, 100.0)
    assert store.get(calibration_key(tiny_model, "fp32", False)) is None, "fp32's entry holds no agreement"
    assert store.speed(calibration_key(tiny_model, "fp16", False)) is None


def test_the_guard_times_both_precisions_on_the_calibration_batch(tiny_model) -> None:
    found = calibrate(tiny_model, "bf16")
    assert set(found.cost_per_s) == {"fp32", "bf16"} and all(v > 0 for v in found.cost_per_s.values())
    assert calibrate(tiny_model, "fp32").cost_per_s == {}, "nothing runs for fp32"
