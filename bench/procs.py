"""Sample a process tree from outside: each process's peak memory and CPU time, by its role.

Used by ``bench/memory.py`` (peak RSS / USS / PSS per worker) and
``bench/scaling.py`` (who spends the CPU: workers, the flow's process, Prefect's
server). A process is read from ``/proc`` through psutil every ``every``
seconds; a process that exits between two samples keeps what its last sample
saw, so its CPU time is undercounted by at most one interval.
"""

from __future__ import annotations

import threading

import psutil

MIB = 1024 * 1024


def role_of(proc: psutil.Process) -> str:
    """``worker`` (a multiprocessing spawn child or a Dask worker), ``server`` (Prefect's), or another."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return "gone"
    if "spawn_main" in line or "distributed" in line:
        return "worker"
    if "resource_tracker" in line:
        return "tracker"
    if "uvicorn" in line or "prefect" in line:
        return "server"
    return "other"


class Sampler:
    """Peak RSS, USS and PSS (with ``memory``) and CPU seconds of a process and each of its descendants,
    read every ``every`` seconds; the root's role is ``root_role``."""

    def __init__(self, pid: int, every: float, root_role: str = "cli", memory: bool = True) -> None:
        self._root, self._every, self._memory = psutil.Process(pid), every, memory
        self.peaks: dict[int, dict[str, float]] = {}
        self.cpu_s: dict[int, float] = {}
        self.roles: dict[int, str] = {self._root.pid: root_role}
        self.samples = 0
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
                procs = [self._root, *self._root.children(recursive=True)]
            except psutil.Error:
                return
            for proc in procs:
                self._sample(proc)
            self.samples += 1
            self._stop.wait(self._every)

    def _sample(self, proc: psutil.Process) -> None:
        try:
            if proc.pid not in self.roles:
                self.roles[proc.pid] = role_of(proc)
            times = proc.cpu_times()
            self.cpu_s[proc.pid] = times.user + times.system
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
        """CPU seconds (user + system) per role, summed over its processes."""
        out: dict[str, float] = {}
        for pid, seconds in self.cpu_s.items():
            role = self.roles.get(pid, "other")
            out[role] = out.get(role, 0.0) + seconds
        return out
