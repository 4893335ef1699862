"""A location reached through ``env:NAME`` or ``secret:NAME`` is stored and shown by that name, not its value.

A run names where its rows come from and where its results go: the ledger
records them (``source_identity``, ``results_table``, the plan's identity),
and the summary line, ``shardwise plan``, the artifacts, the events and a
watcher's events and state show them. Each of those is made from the
*resolved* value (a database URL without its password, a path, an
``s3://`` prefix). When the connection was given as a reference, that value
is the operator's to know, not the reader's: the reference is what was
typed, so it is what is shown (STYLE habit 19).

:func:`by_reference` turns such a text into what may be stored and shown:
every rendering of the reference's value in it is replaced by
``<env:NAME>`` (the renderings :func:`shardwise.secrets.redact.remember_reference`
registered when the reference was resolved in this process), and a
fingerprint of the whole text is appended, ``(sha256:<16 hex digits>)``, so
that a resume or a redrive still matches a run to the source it read and
the results it wrote (:func:`same_location`), without the value being
stored: ``<env:SOURCE_URL>#public.docs (sha256:4f1c...)``. A connection
given as a literal URL or path (or held from the command line) is stored and
shown as before: a database by its URL without the password.

A fingerprint is a one-way digest of what used to be stored in clear (a URL
without its password): it tells two locations apart and matches the same one
again, whichever way it was named, and holds no password.
"""

from __future__ import annotations

import hashlib
import re

from shardwise.secrets.redact import redact

__all__ = ["REFERENCES", "by_reference", "is_reference", "same_location"]

REFERENCES = ("env:", "secret:")
"""The connections whose value is never shown (``held:`` is a URL typed on the command line: shown as
typed, password hidden)."""
_FINGERPRINT = re.compile(r" \(sha256:(?P<digest>[0-9a-f]{16})\)$")


def is_reference(connection: str | None) -> bool:
    """Whether ``connection`` names its value (``env:NAME``, ``secret:NAME``) instead of giving it."""
    return connection is not None and connection.startswith(REFERENCES)


def by_reference(connection: str | None, text: str) -> str:
    """``text``, made from what ``connection`` resolved to, as it may be stored and shown.

    For a reference: its value's renderings in ``text`` shown as ``<env:NAME>``, and ``text``'s
    fingerprint appended, when ``text`` held any of it (a results table's bare name holds none, and
    comes back unchanged). Anything else comes back unchanged: an identity never holds a password,
    and what is stored must not depend on what else this process has masked. The reference must have
    been resolved in this process (that is how its value's renderings are known).
    """
    if not is_reference(connection) or _FINGERPRINT.search(text):
        return text
    shown = redact(text)
    return text if shown == text else f"{shown} (sha256:{_digest(text)})"


def same_location(stored: str, other: str) -> bool:
    """Whether ``stored`` and ``other`` name the same location, each as :func:`by_reference` made it or
    as it was recorded before (in clear): equal, or equal fingerprints (a text in clear has its digest)."""
    if stored == other:
        return True
    return _fingerprint(stored) == _fingerprint(other)


def _fingerprint(text: str) -> str:
    found = _FINGERPRINT.search(text)
    return found.group("digest") if found else _digest(text)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
