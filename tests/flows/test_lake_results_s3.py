"""``shardwise run`` into a lake on S3: a results bucket that does not exist is one line, exit 2, before
any flow run starts; answers cut while the Delta table is opened are ridden out.

moto's S3 server runs in its own process, and so does the fault proxy in front of it
(``tests/sinks/proxy_child.py``): delta-rs holds the GIL in some calls while it waits on the network.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from cli_helpers import flow_runs, ledger_runs, one_line

from shardwise.flows.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sinks"))  # proxy_child: the sink tests'
from proxy_child import Proxy

pytestmark = [pytest.mark.s3, pytest.mark.usefixtures("prefect_harness")]


def _aws(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def cutting(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    """The first try of every GET is cut; the AWS endpoint of this process is the proxy."""
    proxy = Proxy(moto_url, "first_reads_cut")
    _aws(monkeypatch, proxy.url)
    try:
        yield proxy
    finally:
        proxy.stop()


def _run(docs: str, results: str, fmt: str) -> list[str]:
    return [
        "run", "--source", docs, "--table", "docs", "--model", "tiny", "--results", results,
        "--results-format", fmt, "--results-table", "emb", "--progress", "none", "--retry-deadline", "60",
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_a_results_bucket_that_does_not_exist_is_one_line_exit_2_before_any_flow_run(
    docs: str, moto_url: str, fmt: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    _aws(monkeypatch, moto_url)
    missing = f"sw-missing-{uuid.uuid4().hex[:8]}"
    before = flow_runs()
    code = main(_run(docs, f"s3://{missing}/lake", fmt))
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith(f"shardwise: error: results bucket {missing!r} does not exist"), err
    assert f"aws s3 mb s3://{missing}" in err and "\x1b" not in err, err
    assert flow_runs() == before, "a refused command started a flow run"
    assert ledger_runs(docs) == 0


@pytest.mark.slow
def test_answers_cut_while_the_delta_table_opens_do_not_fail_the_run(
    docs: str, moto_url: str, cutting: Proxy, capfd: pytest.CaptureFixture[str]
) -> None:
    bucket = f"sw-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=bucket)
    code = main(_run(docs, f"s3://{bucket}/lake", "delta"))
    captured = capfd.readouterr()
    assert code == 0, captured.err[-3000:]
    cuts = [path for method, path, action in cutting.seen() if action == "cut"]
    assert any("_delta_log" in path for path in cuts), cuts  # the table's log was cut while it opened
    from deltalake import DeltaTable

    opts = {"AWS_ENDPOINT_URL": moto_url, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
    opts |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    keys = DeltaTable(f"s3://{bucket}/lake/emb", storage_options=opts).to_pyarrow_table().column("source_key")
    assert sorted(keys.to_pylist()) == sorted(set(keys.to_pylist())) and len(keys) > 0
