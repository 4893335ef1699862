"""Stop a temporary Prefect server whose owner died: ``python -m flows.server_guard SERVER_PID``.

``shardwise run`` starts Prefect's temporary server as a child process, and
Prefect stops it from an exit handler, which never runs when the command is
killed (SIGKILL, a scheduler's timeout, a second Ctrl-C). This guard is a
second child of the command: it waits for its parent to go (it is then
re-parented, so ``getppid`` changes), stops the server (SIGTERM, then SIGKILL
after 5 s) and exits. A parent-death signal would be simpler, but Linux sends
it when the *thread* that started the child ends, and the server is started
on a short-lived thread.
"""

from __future__ import annotations

import os
import signal
import sys
import time

__all__ = ["guard"]

_POLL_S = 0.5
_GRACE_S = 5.0


def guard(parent: int, server: int) -> None:
    """Wait for ``parent`` to end, then make sure process ``server`` ends too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; outlive it to clean up
    while os.getppid() == parent:
        time.sleep(_POLL_S)
    _stop(server)


def _stop(pid: int) -> None:
    for sig, wait_s in ((signal.SIGTERM, _GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


if __name__ == "__main__":
    guard(int(sys.argv[1]), int(sys.argv[2]))
