"""A shard whose read runs past the query timeout fails with one reason naming the limit, its finished
shards stay merged, and a resume with a higher limit finishes it: workers read with the limit of the run
they serve, and the stored plan records the one it was planned with (issue 24)."""

from __future__ import annotations

import pytest
from flow_data import docs_spec, execute

from shardwise.errors import SourceError
from shardwise.results import Ledger

ROWS = 200


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def _costly(url: str) -> tuple[str, str]:
    """A filter cheap over one-letter texts, and a heavy text it takes seconds over 100 of (MBs a row)."""
    if url.startswith("postgresql"):
        return "length(lpad(text, length(text) * 1000)) > 0", "x" * 3000
    return "length(replace(text, 'x', text)) > 0", "x" * 4000


def _lose_the_plans_snapshot(url: str) -> None:
    """End the planning transaction, as a server's idle timeout would: shards then read the table as it
    is now (the heavy rows), not as planned. SQLite reads the current table anyway."""
    if url.startswith("postgresql"):
        execute(
            url,
            "select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() "
            "and state = 'idle in transaction' and pid <> pg_backend_pid()",
        )


def test_a_shard_past_the_limit_fails_naming_it_and_a_resume_with_more_finishes(url: str, pipeline) -> None:
    execute(url, "create table docs (id bigint primary key, text text)")
    execute(url, "insert into docs (id, text) values (:id, 'x')", [{"id": k} for k in range(ROWS)])
    where, heavy = _costly(url)
    spec = docs_spec(url, where=where, shards=2, query_timeout_s=0.3, precision="fp32")
    planned = pipeline.plan(spec, "timed-out")
    assert planned.plan.param("query_timeout_s") == 0.3
    execute(url, "update docs set text = :t where id >= :half", {"t": heavy, "half": ROWS // 2})
    _lose_the_plans_snapshot(url)
    with pytest.raises(SourceError) as info:
        pipeline.score(planned)
    planned.close()
    message = str(info.value)
    assert message.startswith("reading shard 1 of "), message
    assert "stopped by the query timeout: a query ran past 0.3 s (--query-timeout)" in message, message
    shards = {s.shard_id: s for s in Ledger(url).shards("timed-out")}
    assert shards[0].status == "done" and shards[1].status == "failed", shards
    assert "raise --query-timeout SECONDS" in str(shards[1].last_error)

    resumed = docs_spec(url, where=where, shards=2, query_timeout_s=0, precision="fp32", resume="timed-out")
    planned_again, counts = pipeline.run(resumed, "timed-out")
    assert planned_again.plan.param("query_timeout_s") == 0.3, "the stored plan, as it was made"
    assert counts.shards_done == 2 and counts.rows_out == ROWS
