"""A URL's password must be percent-encoded (shardwise.secrets.url_syntax): the engine refuses one that is
not, unread and unshown, wherever a database URL enters it; an encoded one is read as it always was."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from shardwise.errors import ConfigError
from shardwise.secrets.url_syntax import refuse_unencoded

REFUSED = [
    "postgresql://app:pa/ss word@db/prod",
    "postgresql://app:pa@ss word@db/prod",
    "postgresql://app:pa/ss@wo:rd@db/prod",
    "postgresql://app:100%@db/prod",
    "postgresql://app:p[a]ss@db:5432/prod",
    "postgresql://app:pa#ss@db/prod",
    "postgresql://app:pa?ss@db/prod",
    "postgresql://app:pa ss@db/prod",
    "postgresql://app:pä@db/prod",
    "postgresql://a pp:pass@db/prod",
]
ACCEPTED = [
    "postgresql://app:" + quote("pa/ss w@rd:%#?[]ä", safe="") + "@db:5432/prod",
    "postgresql://app:pa:ss@db/prod",  # ':' may stand in a password: only the first one ends the name
    "postgresql://app:p!$&'()*+,;=~-._@db/prod",
    "postgresql+psycopg://root@127.0.0.1:5432/test",
    "postgresql+psycopg://root:@127.0.0.1:5432/test",
    "postgresql://app:p@[::1]:5432/prod",
    "postgresql://db/prod?user=a@b",
    "sqlite:///tmp/odd @name.db",
    "s3://bucket/prefix",
    "/a/local/path",
]


@pytest.mark.parametrize("url", REFUSED)
def test_an_unencoded_password_is_refused_without_any_of_the_url(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        refuse_unencoded(url, "--source")
    message = str(info.value)
    assert message.startswith("--source: the URL's password (or user name) is not percent-encoded"), message
    assert "urllib.parse.quote" in message and "between ':' and '@'" in message
    assert "app" not in message and "prod" not in message


@pytest.mark.parametrize("url", ACCEPTED)
def test_an_encoded_password_or_none_is_accepted(url: str) -> None:
    refuse_unencoded(url, "--source")


def test_the_source_and_the_store_refuse_it_where_they_read_the_url() -> None:
    from shardwise.results import Ledger
    from shardwise.sources import SqlSource

    url = "postgresql+psycopg://app:Qz9@Kx7 Vw4@127.0.0.1:1/prod"
    with pytest.raises(ConfigError, match=r"^the source database URL: the URL's password") as info:
        SqlSource(url, "docs", "id")
    assert "Kx7" not in str(info.value)
    with pytest.raises(ConfigError, match=r"^the results or ledger database URL: the URL's password") as info:
        Ledger(url)
    assert "Kx7" not in str(info.value)
