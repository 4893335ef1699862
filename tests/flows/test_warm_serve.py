"""``shardwise serve`` runs the on-new-data deployment warm, in its own process, and never with a stale model.

A real Prefect server (the harness's), ``shardwise serve`` and ``shardwise
watch`` as the user starts them, a real PostgreSQL table and a model
directory: an inserted row is scored by a flow run whose planner is the
``serve`` process itself; then the directory gets other weights, and the
next inserted row is scored with the new version, not the loaded one; then a
``shardwise`` module that ``serve`` loaded changes on disk (its mtime), and
the next inserted row is scored by a fresh process instead.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from flow_data import execute, make_docs
from hf_builders import tiny_classifier
from serve_helpers import Output, start, stop

from shardwise.flows import warm_runs
from shardwise.flows.deployments import PREFECT_YAML
from shardwise.models import get_spec

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


def _deployments_for(model: Path, folder: Path) -> Path:
    """The checkout's prefect.yaml, every deployment scoring with ``model``."""
    data = yaml.safe_load(PREFECT_YAML.read_text())
    for deployment in data["deployments"]:
        for block in [
            deployment.get("parameters") or {},
            *[t["parameters"] for t in deployment.get("triggers") or []],
        ]:
            if "params" in block:
                block["params"]["model"] = {"name": str(model)}
    path = folder / "prefect.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _scored(url: str, key: int, served: Output, timeout: float = 120) -> tuple[str, str]:
    """The (run id, model version) of row ``key``'s result, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = execute(
                url, "select run_id, model_version from shardwise_results where source_key = :k", {"k": key}
            )
        except Exception:  # the results table does not exist before the first run
            found = []
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"row {key} was not scored within {timeout} s; serve said:\n{served.text()[-4000:]}")


def test_a_triggered_run_scores_in_the_serve_process_reloads_a_changed_model_and_leaves_changed_code(
    pg_url: str, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL

    make_docs(pg_url, 20, bad=False)
    model = tiny_classifier(tmp_path / "model", seed=0)
    old_version = get_spec(str(model)).describe().version
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "SHARDWISE_SOURCE_URL": pg_url}
    serving, served = start(["serve", "--prefect-yaml", str(_deployments_for(model, tmp_path))], env)
    watch_argv = ["watch", "--source", "env:SHARDWISE_SOURCE_URL", "--table", "docs", "--name", "docs"]
    watching, watched = start([*watch_argv, "--install-trigger"], env)
    try:
        served.wait_for("on-new-data runs warm in this process", serving)
        watched.wait_for("watching docs", watching)

        execute(pg_url, "insert into docs (id, text) values (1001, 'a row that just landed')")
        run_id, version = _scored(pg_url, 1001, served)
        assert version.startswith(old_version), (version, old_version)
        ((owner,),) = execute(pg_url, "select owner from shardwise_runs where run_id = :r", {"r": run_id})
        assert f":{serving.pid}/" in owner, f"planned by {owner}, not by serve (pid {serving.pid})"
        assert execute(pg_url, "select count(*) from shardwise_results") == [(21,)]

        tiny_classifier(model, seed=1)  # other weights in the same directory while serve holds the old ones
        new_version = get_spec(str(model)).describe().version
        assert new_version != old_version
        execute(pg_url, "insert into docs (id, text) values (1002, 'a row after the redeploy')")
        run_id, version = _scored(pg_url, 1002, served)
        assert version.startswith(new_version), "the changed model was served from the stale cache"
        ((owner,),) = execute(pg_url, "select owner from shardwise_runs where run_id = :r", {"r": run_id})
        assert f":{serving.pid}/" in owner
        assert "runs in a fresh process" not in served.text(), served.text()[-4000:]

        # The code a fresh process would import is no longer the code serve runs: the next run goes cold.
        ((scored,),) = execute(pg_url, "select count(*) from shardwise_results")
        module = Path(warm_runs.__file__)
        before = module.stat()
        try:
            os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
            execute(pg_url, "insert into docs (id, text) values (1003, 'a row after a code change')")
            run_id, version = _scored(pg_url, 1003, served, timeout=180)
        finally:
            os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert version.startswith(new_version)
        ((owner,),) = execute(pg_url, "select owner from shardwise_runs where run_id = :r", {"r": run_id})
        assert f":{serving.pid}/" not in owner, f"planned by serve itself ({owner}) after its code changed"
        assert execute(pg_url, "select count(*) from shardwise_results") == [(scored + 1,)], "the new row"
    finally:
        stop(watching)
        stop(serving)
    out = served.text()
    assert "changed since this process loaded it" in out, out[-4000:]
    assert "runs in a fresh process; restart `shardwise serve`" in out, out[-4000:]
