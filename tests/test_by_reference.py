"""A location given as env:NAME is stored and shown by that name and a fingerprint (by_reference.py)."""

from __future__ import annotations

import os

import pytest

from shardwise.secrets.by_reference import by_reference, same_location
from shardwise.secrets.redact import redact
from shardwise.tasks.connections import resolve


def test_a_database_given_by_name_is_recorded_by_name_and_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BYREF_DB", "postgresql://app:Byref-pw1@db.internal:5432/byref_prod?sslmode=require")
    resolve("env:BYREF_DB")
    identity = "postgresql+psycopg://app@db.internal:5432/byref_prod?sslmode=require#public.docs"
    stored = by_reference("env:BYREF_DB", identity)
    assert stored.startswith("<env:BYREF_DB>#public.docs (sha256:") and "byref_prod" not in stored
    assert by_reference("env:BYREF_DB", stored) == stored, "idempotent"
    # The same source, recorded in clear by an earlier release or given as a URL on a resume: the same.
    assert same_location(stored, identity) and same_location(identity, stored)
    assert not same_location(stored, identity.replace("docs", "other"))
    # Every rendering a message may carry shows the name.
    for text in (
        "postgresql://app:Byref-pw1@db.internal:5432/byref_prod?sslmode=require",
        "postgresql+psycopg://app:***@db.internal:5432/byref_prod?sslmode=require",
        "postgresql+psycopg://app@db.internal:5432/byref_prod?sslmode=require",
    ):
        assert redact(f"at {text} failed") == "at <env:BYREF_DB> failed"


def test_a_location_given_by_name_hides_its_path_in_every_spelling(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.setenv("BYREF_LAKE", "s3://byref-bucket/byref/prefix/")
    resolve("env:BYREF_LAKE")
    target = by_reference("env:BYREF_LAKE", "delta:s3://byref-bucket/byref/prefix/t")
    assert target.startswith("delta:<env:BYREF_LAKE>/t (sha256:") and "byref" not in target.split(">", 1)[1]
    quoted = "Error performing GET http://127.0.0.1:9/byref-bucket/byref/prefix/t/_delta_log/_last_checkpoint"
    assert "byref" not in redact(quoted).replace("BYREF", "")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BYREF_DIR", "byref-results")
    resolve("env:BYREF_DIR")
    absolute = os.path.abspath("byref-results")
    assert by_reference("env:BYREF_DIR", f"parquet:{absolute}/t").startswith("parquet:<env:BYREF_DIR>/t (sha")


def test_what_was_not_given_by_name_is_stored_as_it_is() -> None:
    identity = "postgresql+psycopg://app@db/prod#public.docs"
    for connection in ("postgresql+psycopg://app@db/prod", "held:source", None):
        assert by_reference(connection, identity) == identity
    assert by_reference("env:BYREF_UNUSED", "shardwise_results") == "shardwise_results", "a bare table name"
