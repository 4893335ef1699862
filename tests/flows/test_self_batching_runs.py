"""A run with a model that batches by itself (shardwise.model.SelfBatching) commits each row once, with the
same dead letters and only-new as any model: what vLLM and remote endpoints will plug into."""

from __future__ import annotations

import sys
import types
import uuid

import pytest
import sqlalchemy as sa
from flow_data import make_docs
from self_batching_model import ShouterSpec

from shardwise.flows.cli import main

pytestmark = [pytest.mark.usefixtures("prefect_harness")]


def test_a_run_with_a_self_batching_plug_in_commits_each_row_once(sqlite_url: str) -> None:
    rows = make_docs(sqlite_url, 40)
    name = f"shouter_plugin_{uuid.uuid4().hex[:8]}"
    module = types.ModuleType(name)
    module.spec = ShouterSpec()  # type: ignore[attr-defined]
    sys.modules[name] = module
    try:
        argv = [
            "run",
            "--source",
            sqlite_url,
            "--table",
            "docs",
            "--model",
            f"{name}:spec",
            "--progress",
            "none",
        ]
        assert main(argv) == 0
        assert main([*argv, "--only-new"]) == 0
    finally:
        del sys.modules[name]
    engine = sa.create_engine(sqlite_url)
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.text("select source_key, shout from shardwise_results")).all())
        errors = conn.execute(sa.text("select count(distinct source_key) from shardwise_errors")).scalar_one()
    engine.dispose()
    good = {
        key: text.upper()
        for key, text in rows
        if isinstance(text, str) and text.strip() and "bad" not in text
    }
    assert stored == good, "every good row once, scored by the plug-in"
    assert errors == len(rows) - len(good)
    windows = [size for model in module.spec.loaded for size in model.windows]
    assert sum(windows) >= len(good) and all(size > 1 for size in windows), "whole windows, not rows"
