"""Secrets never leave in text: URL passwords, secret parameters, AWS key ids."""

from __future__ import annotations

import pytest

from shardwise.secrets.redact import redact, redact_mapping


def test_url_password_is_masked() -> None:
    got = redact("could not connect to postgresql+psycopg://app:s3cr3t@db:5432/prod")
    assert "s3cr3t" not in got and "postgresql+psycopg://app:***@db:5432/prod" in got


def test_secret_query_parameters_and_aws_keys_are_masked() -> None:
    got = redact("https://b.s3/x?X-Amz-Signature=abc123&a=1 key AKIAABCDEFGHIJKLMNOP password=hunter2")
    assert "abc123" not in got and "ABCDEFGHIJKLMNOP" not in got and "hunter2" not in got
    assert "a=1" in got


def test_nested_mapping() -> None:
    got = redact_mapping({"source": "postgresql://u:pw@h/d", "opts": {"list": ["sqlite:///x", "s3://u:k@b"]}})
    assert got == {"source": "postgresql://u:***@h/d", "opts": {"list": ["sqlite:///x", "s3://u:***@b"]}}


def test_text_without_secrets_is_unchanged() -> None:
    text = "column 'txt' not in table 'docs'; columns are: id, text"
    assert redact(text) == text


@pytest.mark.parametrize(
    "password", ["Pa/ss-X1", "two words", "at@sign1", "co:lon:1", "per%cent", "pä§wörd", "a%2Fb%20c"]
)
def test_url_passwords_are_found_by_the_parser_whatever_they_hold(password: str) -> None:
    from urllib.parse import quote

    from shardwise.secrets.redact import has_password, redact, redact_url

    # @ and % must be percent-encoded to be part of any URL; / and space are read as written
    written = quote(password, safe="/ ") if set(password) & {"@", "%"} else password
    url = f"postgresql+psycopg://app:{written}@db.internal:5432/prod"
    assert has_password(url)
    assert redact_url(url) == "postgresql+psycopg://app:***@db.internal:5432/prod"
    message = f"connection to {url} failed: {password!r} rejected"
    masked = redact(message)
    assert password not in masked and written not in masked, masked
    assert has_password(url.replace(f":{written}@", "@")) is False
