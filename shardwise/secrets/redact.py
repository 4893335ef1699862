"""Keep secrets out of logs, artifacts, the ledger, Prefect's parameters and error messages.

A URL is read with a URL parser, never a pattern: a password may hold ``/``,
a space, ``@``, ``:``, ``%`` or any other character once decoded, so a pattern
that stops at ``/`` or a space would let the rest of the password through.
(A URL whose password is not percent-encoded is refused before anything
reads it, see :mod:`shardwise.secrets.url_syntax`; masking still assumes nothing.)
Three layers, each catching what the one before cannot:

1. :func:`url_password` and :func:`redact_url` parse one URL: the CLI asks
   whether a URL holds a password before it decides how to pass it on, and a
   parameter that is a whole URL is stored with its password hidden;
2. every password this process has parsed is remembered (:func:`remember`),
   and :func:`redact` masks it wherever it appears in free text (a driver's
   error message, a log line), spelled as given or percent-encoded;
3. patterns for what has no parser: a ``scheme://user:pass@`` inside a
   longer text seen for the first time, secret query parameters, AWS keys.

A value reached through a reference (``env:NAME``, ``secret:NAME``) is
remembered whole (:func:`remember_reference`), and with it every rendering of
it as a location (a URL with its password hidden or left out, a path made
absolute), and shown as ``<env:NAME>`` wherever it appears: the reference is
named, never its value, whatever the value is (a URL, a path, or a key
someone passed by mistake). :mod:`shardwise.secrets.by_reference` stores such a
location by the same rule. Once a process
holds such a value, every log record it makes is redacted as it is made
(:func:`redact_log_records`), tracebacks included, so Prefect's log handlers
never see the value.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "has_password",
    "redact",
    "redact_log_records",
    "redact_mapping",
    "redact_url",
    "remember",
    "remember_reference",
    "url_password",
]

_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://[^/\s:@]*):[^@\s/]*@")
_AWS_ACCESS_KEY = re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b")
_SECRET_PARAM = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|secret|token|aws_secret_access_key|aws_session_token|"
    r"X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token)=)[^&\s'\"]+",
    re.IGNORECASE,
)
_STARTS_WITH_URL = re.compile(r"\s*[a-zA-Z][\w+.-]*://")
_MASK = "***"
_SHORTEST_REMEMBERED = 4
"""Shorter passwords are not masked in free text: masking every "ab" would garble messages."""

_known: dict[str, str] = {}
"""Each secret spelling this process has seen, and what shows in its place."""
_known_lock = threading.Lock()


def url_password(url: str) -> str | None:
    """The password of ``url`` as its parser reads it, or None (no password, or not a URL).

    Database URLs are read by SQLAlchemy's parser, as the engine will read
    them; others (``s3://``, ``http://``) by :func:`urllib.parse.urlsplit`.
    A password found is remembered (:func:`remember`), so that it is masked
    wherever it shows up later.
    """
    if "://" not in url:
        return None
    try:
        import sqlalchemy as sa

        password = sa.make_url(url).password
    except Exception:
        try:
            password = urlsplit(url).password
        except ValueError:
            return None
    if password is None:
        return None
    remember(str(password))
    return str(password)


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password (an empty one counts)."""
    return url_password(url) is not None


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, found by the parser, and any value reached through
    a reference replaced by the reference's name; other text unchanged."""
    url_password(url)
    return _mask_known(url)


def remember(password: str | None) -> None:
    """Mask ``password`` from now on wherever :func:`redact` sees it, as given or percent-encoded."""
    if not password or len(password) < _SHORTEST_REMEMBERED:
        return
    _remember(password, _MASK)


def remember_reference(value: str, reference: str) -> None:
    """Show ``<reference>`` from now on wherever ``value`` (what the reference resolved to) would show.

    Any value counts, however short: a short one is masked where it stands
    as a word of its own, so other words keep their letters. A password in it,
    if it is a URL, is remembered too, so the URL's parts stay masked apart.
    """
    if not value:
        return
    for spelling in _renderings(value):
        _remember(spelling, f"<{reference}>")
    url_password(value)
    redact_log_records()


def _renderings(value: str) -> set[str]:
    """``value`` and the other ways a message or a stored record spells it as a whole location.

    A database URL: as SQLAlchemy renders it with the password hidden (``***``)
    or left out, with and without its secret-looking query keys, and under
    ``postgresql+psycopg`` for a bare ``postgresql`` (the sources' identity and
    every error's ``at ...`` use these). A path: its absolute form (the lake
    sinks and the Parquet sources name a location so). An ``s3://`` prefix:
    without a trailing ``/``, and as ``bucket/prefix`` (how object stores
    quote a path). Pieces of a location (a host, a database name, a bucket)
    are not renderings: they are not masked on their own.
    """
    import os

    # No trailing "/": masking "s3://b/p/" in "s3://b/p/table" would eat the "/" before "table".
    found = {value.rstrip("/") or value, value.strip().rstrip("/")}
    if value.startswith("s3://"):
        bare = value.removeprefix("s3://").rstrip("/")
        if "/" in bare:
            found.add(bare)
    elif "://" in value:
        found |= _url_renderings(value)
    else:
        found.add(os.path.abspath(os.path.expanduser(value)).rstrip("/") or value)
    return {spelling for spelling in found if spelling}


def _url_renderings(value: str) -> set[str]:
    try:
        import sqlalchemy as sa

        from shardwise.db.errors import without_secrets

        parsed = sa.make_url(value)
    except Exception:  # not a URL SQLAlchemy reads: its own text is all there is to mask
        return set()
    urls = [parsed]
    if parsed.drivername == "postgresql":
        urls.append(parsed.set(drivername="postgresql+psycopg"))  # as the SQL source reads it
    found: set[str] = set()
    for url in urls:
        for kept in (url, without_secrets(url, keep_password=True)):
            found.add(kept.render_as_string(hide_password=True))
            found.add(kept.render_as_string(hide_password=False))
        found.add(without_secrets(url).render_as_string(hide_password=False))
    return found


def _remember(secret: str, mask: str) -> None:
    with _known_lock:
        for spelling in (secret, quote(secret, safe=""), unquote(secret)):
            if _known.get(spelling, _MASK) == _MASK:  # a reference's name beats a plain mask
                _known[spelling] = mask


def _mask_known(text: str) -> str:
    with _known_lock:
        known = sorted(_known.items(), key=lambda item: len(item[0]), reverse=True)  # longer first
    for secret, mask in known:
        if secret not in text:
            continue
        if len(secret) >= _SHORTEST_REMEMBERED:
            text = text.replace(secret, mask)
        else:
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", mask.replace("\\", "\\\\"), text)
    return text


_factory_lock = threading.Lock()
_redacting = False


def redact_log_records() -> None:
    """From now on, every log record this process makes is redacted when it is made (idempotent).

    Its message is formatted and redacted at once, and so is the traceback of
    an exception it carries, so no handler (Prefect's API handler included)
    formats the secret later. Records are made only for enabled levels, so
    the cost is one redaction per line actually logged.
    """
    global _redacting
    with _factory_lock:
        if _redacting:
            return
        _redacting = True
        make = logging.getLogRecordFactory()

        def redacted_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make(*args, **kwargs)
            try:
                record.msg, record.args = redact(record.getMessage()), ()
                if record.exc_info and record.exc_info[1] is not None:
                    record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            except Exception:  # a record that cannot be formatted is left for its handler to report
                pass
            return record

        logging.setLogRecordFactory(redacted_record)


def redact(text: str) -> str:
    """``text`` with passwords, secret query parameters and AWS access key ids masked.

    A text that is one URL is read by the parser (and its password
    remembered); known passwords are masked anywhere; the patterns catch the
    rest.
    """
    if _STARTS_WITH_URL.match(text):
        url_password(text.strip())  # remembered, so masked below however it is spelled
    text = _mask_known(text)
    text = _URL_PASSWORD.sub(r"\g<head>:***@", text)
    text = _SECRET_PARAM.sub(r"\g<head>***", text)
    return _AWS_ACCESS_KEY.sub("AKIA****************", text)


def redact_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``values`` with every string (nested too) passed through :func:`redact`.

    A string that is a whole URL goes through the parser first, so a password
    holding a space or a ``/`` is hidden too.
    """
    return {k: _redact_value(v) for k, v in values.items()}


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(redact_url(value))
    if isinstance(value, Mapping):
        return redact_mapping(value)
    if isinstance(value, (list, tuple)):
        return [_redact_value(v) for v in value]
    return value
