"""The S3 fault proxy (``tests/sources/s3_proxy.py``) in a process of its own, for delta-rs.

delta-rs holds Python's GIL in some calls while it waits on the network
(``DeltaTable.history()``), so a proxy serving from the test's own process
would stall until delta-rs's timeout. Usage: ``python proxy_child.py
UPSTREAM RULE``, ``RULE`` one of :data:`RULES`. It prints its URL, then
answers each line ``log`` on stdin with the requests it saw as one JSON
line (``[method, path, action]`` each), and exits when stdin closes.
:class:`Proxy` is the test's handle on such a process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sources"))
from s3_proxy import FaultProxy, Seen, pass_all


def first_reads_cut(seen: Seen) -> str:
    """Cut the first try of every GET (the table's log, its files, listings); let the retries through."""
    return "cut" if seen.method == "GET" and seen.repeat == 0 else "pass"


RULES = {"pass_all": pass_all, "first_reads_cut": first_reads_cut}


class Proxy:
    """The fault proxy's process: its URL, and what it saw."""

    def __init__(self, upstream: str, rule: str) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), upstream, rule]
        self._child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._child.stdout is not None
        self.url = self._child.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.url

    def seen(self) -> list[tuple[str, str, str]]:
        """Every request so far: (method, path, action)."""
        assert self._child.stdin is not None and self._child.stdout is not None
        self._child.stdin.write("log\n")
        self._child.stdin.flush()
        return [tuple(s) for s in json.loads(self._child.stdout.readline())]  # type: ignore[misc]

    def stop(self) -> None:
        assert self._child.stdin is not None
        self._child.stdin.close()
        self._child.wait(30)


def main() -> None:
    with FaultProxy(sys.argv[1], RULES[sys.argv[2]]) as proxy:
        print(proxy.url, flush=True)
        for line in sys.stdin:
            if line.strip() == "log":
                print(json.dumps([[s.method, s.path, s.action] for s in list(proxy.log)]), flush=True)


if __name__ == "__main__":
    main()
