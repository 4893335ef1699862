"""Real text harvested at run time from the installed Python standard library.

The demo, the tests and the default benchmark need prose that looks like real
data. Rather than copy third-party text into the repository, this reads the
docstrings of the interpreter's own standard library, which every install has.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator

__all__ = ["STDLIB_MODULES", "harvest_docstrings"]

# Deterministic order; modules that are missing on some platforms are skipped.
STDLIB_MODULES = (
    "abc argparse array ast asyncio base64 bisect calendar collections colorsys contextlib copy csv "
    "dataclasses datetime decimal difflib email enum fnmatch fractions functools getopt gettext glob "
    "gzip hashlib heapq hmac html http.client imaplib inspect io ipaddress itertools json logging "
    "lzma mailbox mimetypes numbers operator optparse os pathlib pickle pprint queue random re "
    "sched secrets selectors shlex shutil smtplib socket sqlite3 statistics string struct subprocess "
    "tarfile tempfile textwrap threading timeit tokenize traceback typing unittest urllib.parse uuid "
    "warnings weakref xml.dom.minidom zipfile zoneinfo"
).split()

_BLANK_LINE = re.compile(r"\n\s*\n")
_SPACES = re.compile(r"\s+")


def harvest_docstrings(limit: int | None = None, min_chars: int = 20) -> list[str]:
    """Up to ``limit`` distinct docstring paragraphs, whitespace-normalised, in a stable order."""
    seen: set[str] = set()
    out: list[str] = []
    for doc in _docstrings():
        for paragraph in _BLANK_LINE.split(doc):
            text = _SPACES.sub(" ", paragraph).strip()
            if len(text) < min_chars or text in seen or text.startswith(">>>"):
                continue
            seen.add(text)
            out.append(text)
            if limit is not None and len(out) >= limit:
                return out
    return out


def _docstrings() -> Iterator[str]:
    for name in STDLIB_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        yield from _docs_of(module)


def _docs_of(module: object) -> Iterator[str]:
    if doc := inspect.getdoc(module):
        yield doc
    for _, member in sorted(vars(module).items()):
        if getattr(member, "__module__", None) != getattr(module, "__name__", None):
            continue
        if (inspect.isclass(member) or inspect.isfunction(member)) and (doc := inspect.getdoc(member)):
            yield doc
        if inspect.isclass(member):
            for _, attr in sorted(vars(member).items()):
                if inspect.isfunction(attr) and (doc := inspect.getdoc(attr)):
                    yield doc
