"""Turn what each GPU step's command wrote into figure lines (``bench/gpu_lines.py``), and say if it failed.

The benches end with one JSON object (their ``KEYS``); pytest writes a JUnit
XML report. Each figure a bench reports has a unit here; the keys that only
describe the run (rows, precision...) go on every line of the step as
context instead. A key a bench adds later is still printed, with no unit,
until it is given one here (a test checks that every key of the benches'
``KEYS`` is placed).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.gpu_lines import figure_line

__all__ = [
    "ALSO_UNITS",
    "ENCODE_CONTEXT",
    "ENCODE_UNITS",
    "GENERATE_CONTEXT",
    "GENERATE_UNITS",
    "H2D_CONTEXT",
    "H2D_UNITS",
    "Readout",
    "bench_figures",
    "last_json",
    "pytest_summary",
]

ENCODE_UNITS = {
    "rows_per_s": "rows/s",
    "padding_efficiency": "fraction",
    "agreement": "guard",
    "st_rows_per_s": "rows/s",
    "speedup_vs_st": "x",
    "min_cosine_vs_st": "cosine",
    "st_same_precision_rows_per_s": "rows/s",
    "speedup_vs_st_same_precision": "x",
    "static_rows_per_s": "rows/s",
    "speedup_vs_static": "x",
    "fp32_rows_per_s": "rows/s",
    "speedup_vs_fp32": "x",
    "min_cosine_vs_fp32": "cosine",
    "mean_cosine_vs_fp32": "cosine",
}
ENCODE_CONTEXT = ("rows", "precision", "cpu_int8_kernel", "load_average")

GENERATE_UNITS = {
    "tokens_per_s": "tokens/s",
    "rows_per_s": "rows/s",
    "hf_tokens_per_s": "tokens/s",
    "hf_rows_per_s": "rows/s",
    "speedup_tokens_per_s": "x",
    "speedup_rows_per_s": "x",
    "match_share": "fraction",
    "completion_tokens": "tokens",
    "hf_completion_tokens": "tokens",
    "padding_efficiency": "fraction",
    "hf_padding_efficiency": "fraction",
    "engine_start_s": "s",
    "bare_vllm_tokens_per_s": "tokens/s",
    "ratio_vs_bare_vllm": "x",
    "ratio_vs_hf": "x",
    "match_share_vs_hf": "fraction",
    "match_share_vs_bare_vllm": "fraction",
    "bare_prompt_equal_share": "fraction",
    "bare_completion_tokens": "tokens",
    "plain_prefix_cache_hit_rate": "fraction",
    "system_tokens_per_s": "tokens/s",
    "system_bare_vllm_tokens_per_s": "tokens/s",
    "system_ratio_vs_bare_vllm": "x",
    "system_match_share_vs_bare_vllm": "fraction",
    "prefix_cache_hit_rate": "fraction",
    "bare_prefix_cache_hit_rate": "fraction",
}
GENERATE_CONTEXT = (
    "rows",
    "model",
    "max_new_tokens",
    "threads",
    "also",
    "engine",
    "dtype",
    "load_average",
    "rounds",
    "hf_rows",
    "system_tokens",
)
ALSO_UNITS = {
    "tokens_per_s": "tokens/s",
    "ratio_to_fp32": "x",
    "seconds": "s",
    "match_share_fp32": "fraction",
    "padding_efficiency": "fraction",
    "guard_agreement": "fraction",
    "guard_accepts": "bool",
}
"""The figures of each entry of ``bench/generate.py --also``."""

H2D_UNITS = {
    "copy_ms": "ms",
    "pin_ms": "ms",
    "compute_ms": "ms",
    "serial_ms": "ms",
    "prefetched_ms": "ms",
    "h2d_gb_s": "GB/s",
    "overlap_fraction": "fraction",
    "speedup_vs_serial": "x",
    "outputs_equal": "bool",
}
H2D_CONTEXT = ("batches", "rows", "batch_mb", "compute_iterations")


@dataclass
class Readout:
    """A step's figure lines, and what went wrong if its output says it failed."""

    figures: list[dict[str, object]] = field(default_factory=list)
    error: str | None = None


def last_json(stdout: str) -> dict[str, object]:
    """The last line of ``stdout`` that is a JSON object: where every bench puts its results."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                found = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(found, dict):
                return found
    raise ValueError("the command printed no JSON line of results (was --json passed?)")


def bench_figures(
    step: str,
    result: Mapping[str, object],
    units: Mapping[str, str],
    context_keys: tuple[str, ...],
    **context: object,
) -> list[dict[str, object]]:
    """One figure line per number in ``result``, with ``context`` and the result's own context keys.

    A figure the bench left ``null`` (a baseline it did not run) is not a line.
    """
    own = {k: result[k] for k in context_keys if result.get(k) is not None and k != "also"}
    shared = {**own, **context}  # ours win: the step's name for the model says where it came from
    lines = []
    for key, value in result.items():
        if key in context_keys or value is None or not isinstance(value, (int, float)):
            continue
        lines.append(figure_line(step, key, value, units.get(key), **shared))
    return lines


def pytest_summary(step: str, report: Path, **context: object) -> Readout:
    """One line from pytest's JUnit report: passed as the figure, the other counts and the failures beside."""
    suite = ET.parse(report).getroot()
    if suite.tag == "testsuites":
        suite = suite[0]
    counts = {name: int(suite.get(name, "0")) for name in ("tests", "failures", "errors", "skipped")}
    failing = [
        f"{case.get('classname')}::{case.get('name')}: {_first_line(problem.get('message'))}"
        for case in suite.iter("testcase")
        for problem in case
        if problem.tag in {"failure", "error"}
    ]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    line = figure_line(
        step,
        "passed",
        passed,
        "tests",
        failed=counts["failures"],
        errors=counts["errors"],
        skipped=counts["skipped"],
        total=counts["tests"],
        seconds=float(suite.get("time", "0")),
        failing=failing,
        **context,
    )
    bad = counts["failures"] + counts["errors"]
    if counts["tests"] == 0:
        return Readout([line], "pytest ran no test marked gpu")
    return Readout(
        [line], f"{bad} of {counts['tests']} GPU tests failed: {'; '.join(failing)}" if bad else None
    )


def _first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
