"""Run each results-store test on SQLite and on real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from results_helpers import make_store

from shardwise.results import ResultStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A fresh database URL: an SQLite file, or an empty PostgreSQL database."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def store(db_url: str) -> Iterator[ResultStore]:
    """An int-keyed store with every output kind, schema created."""
    with make_store(db_url) as st:
        st.ensure_schema()
        yield st
