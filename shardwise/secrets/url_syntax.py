"""A database URL's user name and password must be percent-encoded, or the URL is refused unread.

``postgresql://app:pa/ss word@db/prod`` holds a password with a ``/`` and a
space left as they are. Parsers disagree on where such a password ends:
:func:`urllib.parse.urlsplit` (RFC 3986) ends the host at the first ``/``,
SQLAlchemy's parser at the first ``@``; a ``@`` in the password makes
SQLAlchemy take its tail for the host (``failed to resolve host 'ss
word@db'``), and ``pa/ss@wo:rd`` made it raise a bare ``ValueError`` quoting
``'rd@db'``. Each showed a piece of the password to whoever reads the error,
and no redaction can mask a piece it cannot find.

So before any other code reads a database URL that carries a user name or a
password, :func:`refuse_unencoded` checks it and refuses it when its
userinfo is not written as RFC 3986 says: only letters, digits, ``-._~``,
``!$&'()*+,;=``, ``:`` (between the name and the password) and ``%XX``
escapes. A URL that passes reads the same under both parsers, so every layer
(the engines, the redaction, a driver's error) agrees on what the password
is. The refusal names the option or reference the URL came from, never the
URL or any part of it, and says how to encode the password
(``urllib.parse.quote(password, safe="")``, reading the password on stdin).

This reverses an earlier leniency: raw ``/`` and spaces, which SQLAlchemy's
parser happened to read, are refused too, because they are exactly what
makes the two parsers (and a reader of the URL) disagree.
"""

from __future__ import annotations

import string
from urllib.parse import SplitResult, unquote, urlsplit

from sqlalchemy.engine import URL, make_url

from shardwise.errors import ConfigError

__all__ = ["ENCODE_HINT", "UNENCODED", "refuse_unencoded"]

_USERINFO = frozenset(string.ascii_letters + string.digits + "-._~" + "!$&'()*+,;=" + ":")
"""RFC 3986's ``userinfo`` characters, ``%XX`` escapes apart."""

ENCODE_HINT = (
    "percent-encode it with python3 -c \"import urllib.parse; print(urllib.parse.quote(input(), safe=''))\" "
    "(it reads the password on stdin, so it stays out of the shell's history) and write the result "
    "between ':' and '@'"
)

UNENCODED = (
    "the URL's password (or user name) is not percent-encoded: it holds a character such as / ? # @ % "
    f"[ ] or a space, or one outside ASCII, where parsers disagree (the URL is not shown); {ENCODE_HINT}"
)


def refuse_unencoded(url: str, named: str) -> None:
    """Raise :class:`ConfigError` when ``url`` carries a user name or password that is not
    percent-encoded. ``named`` says where the URL came from (``--source``, ``env:DB_URL``, ``the
    source database URL``); the message shows nothing of the URL itself."""
    if "://" in url and not _well_formed(url):
        raise ConfigError(f"{named}: {UNENCODED}")


def _well_formed(url: str) -> bool:
    """True when ``url`` has no userinfo, or one that RFC 3986 and SQLAlchemy read alike."""
    try:
        rfc = urlsplit(url)
    except ValueError:
        rfc = None
    try:
        ours = make_url(url)
    except Exception:  # ValueError from a port it cannot read, ArgumentError ...
        ours = None
    if ours is None:
        # SQLAlchemy cannot read it: with a '@' in it, a password may be what broke it (pa/ss@wo:rd
        # made a port of 'rd@db'); without one, it is refused where it is read, as any bad URL is.
        return "@" not in url.split("://", 1)[1]
    userinfo = rfc.netloc.rpartition("@")[0] if rfc is not None else ""
    if not userinfo and ours.username is None and ours.password is None:
        return True  # nothing secret in it
    return rfc is not None and _encoded(userinfo) and _agree(rfc, ours)


def _encoded(userinfo: str) -> bool:
    """Every character is an RFC 3986 userinfo character, or part of a ``%XX`` escape."""
    i = 0
    while i < len(userinfo):
        if userinfo[i] == "%":
            escape = userinfo[i + 1 : i + 3]
            if len(escape) != 2 or not all(c in string.hexdigits for c in escape):
                return False
            i += 3
        elif userinfo[i] in _USERINFO:
            i += 1
        else:
            return False
    return True


def _agree(rfc: SplitResult, ours: URL) -> bool:
    """The two parsers read the same user name, password, host and port."""
    try:
        theirs = (
            None if rfc.username is None else unquote(rfc.username),
            None if rfc.password is None else unquote(rfc.password),
            (rfc.hostname or "").lower(),
            rfc.port,
        )
    except ValueError:  # a port RFC 3986 cannot read: the host ended inside the password
        return False
    return theirs == (ours.username, ours.password, (ours.host or "").lower(), ours.port)
