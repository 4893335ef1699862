"""Sample a process tree from outside: each process's peak memory and CPU time, by its role.

Used by ``bench/memory.py`` (peak RSS / USS / PSS per worker) and
``bench/scaling.py`` (who spends the CPU: workers, the flow's process, Prefect's
server). A process is read from ``/proc`` through psutil every ``every``
seconds; a process that exits between two samples keeps what its last sample
saw, so its CPU time is undercounted by at most one interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psutil

MIB = 1024 * 1024


def role_of(proc: psutil.Process) -> str:
    """``worker`` (a multiprocessing spawn child or a Dask worker), ``server`` (Prefect's),
    ``database`` (a PostgreSQL backend), or another."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return "gone"
    if "spawn_main" in line or "distributed" in line:
        return "worker"
    if line.startswith("postgres:"):
        return "database"
    if "resource_tracker" in line:
        return "tracker"
    if "uvicorn" in line or "prefect" in line:
        return "server"
    return "other"


class Sampler:
    """Peak RSS, USS and PSS (with ``memory``) and CPU seconds of a process and each of its descendants,
    read every ``every`` seconds; the root's role is ``root_role``."""

    def __init__(
        self,
        pid: int,
        every: float,
        root_role: str = "cli",
        memory: bool = True,
        also: Callable[[], list[psutil.Process]] | None = None,
    ) -> None:
        self._root, self._every, self._memory, self._also = psutil.Process(pid), every, memory, also
        self.peaks: dict[int, dict[str, float]] = {}
        self.cpu_s: dict[int, float] = {}
        self.roles: dict[int, str] = {self._root.pid: root_role}
        self.samples = 0
        self._cpu_first: dict[int, float] = {}
        self.history: list[tuple[float, dict[int, float]]] = []
        """(wall-clock time, CPU seconds so far of each process seen) at each sample."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [
                    self._root,
                    *self._root.children(recursive=True),
                    *(self._also() if self._also else []),
                ]
            except psutil.Error:
                return
            for proc in procs:
                self._sample(proc)
            self.samples += 1
            self.history.append((time.time(), dict(self.cpu_s)))
            self._stop.wait(self._every)

    def _sample(self, proc: psutil.Process) -> None:
        try:
            if proc.pid not in self.roles:
                self.roles[proc.pid] = role_of(proc)
            self.cpu_s[proc.pid] = _cpu(proc)
            if proc.pid == self._root.pid or self.roles[proc.pid] == "database":
                self._cpu_first.setdefault(proc.pid, self.cpu_s[proc.pid])
            info = proc.memory_full_info() if self._memory else None
        except psutil.Error:
            return
        if info is None:
            return
        peak = self.peaks.setdefault(proc.pid, {"rss": 0.0, "uss": 0.0, "pss": 0.0})
        for name in peak:
            peak[name] = max(peak[name], getattr(info, name, 0) / MIB)

    def by_role(self, role: str) -> list[dict[str, float]]:
        """The peak memory (MiB) of each process of ``role``."""
        return [self.peaks[pid] for pid, r in self.roles.items() if r == role and pid in self.peaks]

    def cpu_by_role(self) -> dict[str, float]:
        """CPU seconds (user + system) per role while sampled, summed over its processes (the root's
        and ``also``'s from the first sample on, every descendant's since it started)."""
        out: dict[str, float] = {}
        for pid, seconds in self.cpu_s.items():
            seconds -= self._cpu_first.get(pid, 0.0)
            role = self.roles.get(pid, "other")
            out[role] = out.get(role, 0.0) + seconds
        return out

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per role between two wall-clock times (to within one sampling interval)."""
        before = next((seen for at, seen in reversed(self.history) if at <= start), {})
        after = next((seen for at, seen in reversed(self.history) if at <= end), {})
        out: dict[str, float] = {}
        for pid, seconds in after.items():
            role = self.roles.get(pid, "other")
            out[role] = out.get(role, 0.0) + seconds - before.get(pid, 0.0)
        return out


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def database_backends(database: str) -> Callable[[], list[psutil.Process]]:
    """The PostgreSQL backends serving ``database`` (their titles name it): a :class:`Sampler`'s ``also``."""

    def found() -> list[psutil.Process]:
        out = []
        for proc in psutil.process_iter(["cmdline"]):
            line = " ".join(proc.info["cmdline"] or [])
            if line.startswith("postgres:") and f" {database} " in f"{line} ":
                out.append(proc)
        return out

    return found
