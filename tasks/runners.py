"""Which engine runs the shard tasks, how many workers it has, and how many torch threads each gets.

Shardwise never schedules a cluster itself; it picks one of these, from the
flow's parameters, at run time:

=============  ======================================================================
``thread``     Prefect's ``ThreadPoolTaskRunner`` in the flow's process (the default)
``process``    Prefect's ``ProcessPoolTaskRunner``: N worker processes on this host
``dask``       prefect-dask's ``DaskTaskRunner``: a ``LocalCluster`` of N single-threaded
               worker processes, or the existing cluster at ``address``
``ray``        prefect-ray's ``RayTaskRunner``: a local Ray of N CPUs, or the cluster at
               ``address``; on CUDA each shard task asks Ray for one GPU
``deployment`` one child flow run per shard of the ``score-shard`` deployment, on its
               work pool (Kubernetes: one pod per GPU); see ``flows/score_shard.py``
=============  ======================================================================

Workers default to one per visible GPU, or one on a CPU-only host. On a CPU
the host's cores are shared out: each of N local workers gets
``cores // N`` torch threads, so workers never oversubscribe the cores. With
``address`` the workers live elsewhere: ``workers`` then only sizes the
default shard count (by default, the Dask cluster's worker threads or the Ray
cluster's GPUs, or CPUs), and each worker keeps its own thread default
unless ``threads`` is given.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from shardwise.db.connect import on_this_host
from shardwise.errors import ConfigError, TransientError
from shardwise.flags import Flag
from shardwise.pipeline import Resolver, RunSpec
from shardwise.pipeline.preemption import drain_on_sigterm
from shardwise.process.lifeline import die_with_parent
from shardwise.process.reaper import reaping
from shardwise.settings import Settings
from shardwise.words import plural

__all__ = ["RUNNERS", "Fanout", "FanoutSettings", "RunnerName", "cores"]

RunnerName = Literal["thread", "process", "dask", "ray", "deployment"]
RUNNERS: tuple[str, ...] = get_args(RunnerName)
_MISSING = "runner {runner!r} needs {packages}; install them with: pip install 'shardwise[{runner}]'"


def cores() -> int:
    """CPU cores this process may use (its affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _visible_gpus(device: str) -> int:
    if device == "cpu":
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


_DEPLOYMENT = "score-shard/per-shard"


class FanoutSettings(Settings):
    """What runs the shards (README: Scaling out): the ``fanout`` section of the flow's form, as asked;
    :meth:`Fanout.of` resolves it (worker counts, threads)."""

    runner: RunnerName = Field(
        "thread",
        description="What runs the shard tasks: thread (this process), process (a pool of worker "
        "processes), dask, ray, or deployment (one flow run per shard on the score-shard deployment's "
        "work pool).",
    )
    workers: Annotated[int | None, Flag(metavar="N")] = Field(
        None,
        ge=1,
        description="Workers scoring at once (default: one per visible GPU, else 1). With address it "
        "only sizes the default shard count; with the deployment runner it caps the child runs in flight.",
    )
    address: str | None = Field(
        None,
        description="An existing cluster to use instead of a local one: dask tcp://host:8786, or a Ray "
        "address (host:6379 or ray://host:10001). Its workers must reach the source and results.",
    )
    threads: Annotated[int | None, Flag(metavar="N")] = Field(
        None,
        ge=1,
        description="Torch threads per worker (default: this host's cores shared among local workers; "
        "the workers' own default on a cluster at address).",
    )
    deployment: Annotated[str, Flag(metavar="FLOW/NAME")] = Field(
        _DEPLOYMENT,
        description="With the deployment runner: the per-shard flow's deployment, FLOW/NAME (refused with "
        "another runner).",
    )

    @field_validator("runner", mode="before")
    @classmethod
    def _a_runner(cls, value: object) -> object:
        if value not in RUNNERS:
            raise ConfigError(f"runner must be one of {', '.join(RUNNERS)}; got {value!r}")
        return value

    @model_validator(mode="after")
    def _applies(self) -> FanoutSettings:
        """An address or a deployment the runner does not use would do nothing, so it is refused, not
        ignored. A default value is not given, so a deployment's defaults pass."""
        if self.deployment != _DEPLOYMENT and self.runner != "deployment":
            raise ValueError(
                f"--deployment {self.deployment!r} would do nothing: it names the deployment runner's "
                f"per-shard flow, and runner is {self.runner!r}; drop it, or give --runner deployment"
            )
        if self.address is not None and self.runner not in ("dask", "ray"):
            raise ConfigError(
                f"address {self.address!r} names an existing cluster, which only the dask and ray runners "
                f"use; drop --address, or use --runner dask or ray (runner is {self.runner!r})"
            )
        if self.address is not None and not self.address.strip():
            raise ConfigError("address is empty; give the scheduler's address, e.g. tcp://host:8786")
        return self


@dataclass(frozen=True)
class Fanout:
    """The fan-out of one run, resolved: the settings asked, how many workers there are, and each
    worker's torch threads."""

    asked: FanoutSettings
    workers: int
    threads: int | None
    gpus: bool = False
    """Whether shard tasks run on CUDA (Ray is then asked for one GPU per task)."""
    in_flight: int | None = None
    """``deployment``: child flow runs started at once (None: every shard; the work pool queues them)."""

    @property
    def runner(self) -> RunnerName:
        return self.asked.runner

    @property
    def address(self) -> str | None:
        return self.asked.address

    @property
    def deployment(self) -> str:
        return self.asked.deployment

    def describe(self) -> str:
        """For the log: ``on the dask runner with 3 workers, 2 torch threads each``."""
        threads = f", {plural(self.threads, 'torch thread')} each" if self.threads else ""
        return f"on the {self.runner} runner with {plural(self.workers, 'worker')}{threads}"

    @property
    def remote(self) -> bool:
        """Whether workers may sit on another host: an existing cluster, or a work pool."""
        return self.address is not None or self.runner == "deployment"

    @classmethod
    def of(cls, asked: FanoutSettings, *, device: str = "auto") -> Fanout:
        """Fill in the defaults of ``asked`` (see the module docstring); an existing cluster is asked its
        size."""
        gpus = _visible_gpus(device)
        if asked.address is not None:
            found, remote_gpus = _cluster_size(asked.runner, asked.address, device)
            return cls(asked, asked.workers or found, asked.threads, remote_gpus)
        if asked.runner == "deployment":
            return cls(asked, asked.workers or 1, asked.threads, device.startswith("cuda"), asked.workers)
        count = asked.workers or max(gpus, 1)
        return cls(asked, count, asked.threads or max(1, cores() // count), gpus > 0)

    def check_reachable(self, spec: RunSpec, resolve: Resolver) -> None:
        """Refuse a source or results database that workers on other hosts could not reach.

        An SQLite file or a local Parquet path exists on this host only; with
        ``address`` or the ``deployment`` runner the workers may be elsewhere. The source's kind and the
        results' kind say which of their locations are so; the ledger is a database.
        """
        if not self.remote:
            return
        where = (
            f"the workers of the cluster at {self.address}"
            if self.address
            else f"the flow runs of deployment {self.deployment!r}"
        )
        local = "drop --address to use a local cluster, or use --runner thread or process"
        # Imported here: the flow's parameters name the runners, and --help builds them without the
        # kinds' modules or the ledger's database drivers.
        from shardwise.pipeline.destination import ledger_url, results_place
        from shardwise.sources.registry import kind_at

        source, results = resolve(spec.source.location), resolve(spec.results_location)
        if kind_at(source).on_this_host(source):
            raise ConfigError(
                f"source {spec.source.location!r} is a file on this host, and {where} may run on other "
                f"hosts, which cannot read it; put the rows in PostgreSQL or on S3, or {local}"
            )
        if results_place(spec, results).on_this_host():
            raise ConfigError(
                f"results {spec.results_location!r} are on this host (an SQLite file or a local directory), "
                f"and {where} may run on other hosts, which cannot write them; pass --results "
                f"postgresql+psycopg://... or s3://..., or {local}"
            )
        if on_this_host(ledger_url(spec, resolve)):
            raise ConfigError(
                f"the run's ledger is an SQLite file on this host, and {where} may run on other hosts, "
                f"which cannot reach it; pass --ledger postgresql+psycopg://..., or {local}"
            )

    def task_runner(self) -> Any:
        """A fresh Prefect task runner for this fan-out, to use as a context manager in the flow."""
        if self.runner == "thread":
            from prefect.task_runners import ThreadPoolTaskRunner

            return ThreadPoolTaskRunner(max_workers=self.workers)
        if self.runner == "process":
            from prefect.task_runners import ProcessPoolTaskRunner

            # Its workers die with this process: a killed run leaves none behind (see
            # shardwise.process.lifeline); one told to stop lets its shard go and exits 0 (see
            # shardwise.pipeline.preemption).
            return ProcessPoolTaskRunner(
                max_workers=self.workers, initializer=_pool_worker_start, initargs=(os.getpid(),)
            )
        if self.runner == "dask":
            return _dask_runner(self.address, self.workers)
        if self.runner == "ray":
            return _ray_runner(self.address, self.workers)
        raise ConfigError(f"runner {self.runner!r} starts flow runs, not tasks; it has no task runner")

    def guarding(self) -> AbstractContextManager[object]:
        """Around :meth:`task_runner`: what ends the local processes a killed run would leave running.

        A local Ray node's agents outlive the raylet by a minute, so a local
        Ray runs under a reaper (:mod:`shardwise.process.reaper`). The process pool's
        workers die with this process by themselves (:mod:`shardwise.process.lifeline`),
        a local Dask cluster's by Dask's own watch; a cluster at ``address``
        is not this run's to end.
        """
        if self.runner == "ray" and self.address is None:
            return reaping()
        return nullcontext()

    def task_options(self) -> AbstractContextManager[object]:
        """What each shard task asks its engine for: on Ray, one GPU on CUDA, else its threads' CPUs."""
        if self.runner != "ray":
            return nullcontext()
        from prefect_ray.context import remote_options

        if self.gpus:
            return remote_options(num_gpus=1)  # type: ignore[no-any-return]
        return remote_options(num_cpus=self.threads or 1)  # type: ignore[no-any-return]


def _pool_worker_start(parent: int) -> None:
    """The process pool's initializer: die with the planning process ``parent``, drain on SIGTERM."""
    die_with_parent(parent)
    drain_on_sigterm()


def _dask_runner(address: str | None, workers: int) -> Any:
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise ConfigError(_MISSING.format(runner="dask", packages="prefect-dask and distributed")) from exc
    if address is not None:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": workers,
            "threads_per_worker": 1,
            "processes": True,
            # Nothing of a local cluster listens beyond this host, nor on a fixed port.
            "host": "127.0.0.1",
            "dashboard_address": "127.0.0.1:0",
            # No statistical profiler: it samples the scoring thread every 10 ms and ships the profiles
            # to the flow's process, on the workers' cores; nothing reads them (see bench/scaling.py).
            "config": {"distributed.worker.profile.enabled": False},
            # Each worker process exits at once when the cluster closes, instead of being killed after
            # 4 s spent freeing torch's modules (see tasks/dask_preload.py).
            "preload": ["shardwise.tasks.dask_preload"],
        }
    )


def _ray_runner(address: str | None, workers: int) -> Any:
    if address is None:
        _local_ray_environment()
    try:
        from prefect_ray import RayTaskRunner
    except ImportError as exc:
        raise ConfigError(_MISSING.format(runner="ray", packages="prefect-ray and ray")) from exc
    if address is not None:
        return RayTaskRunner(address=address)
    return RayTaskRunner(init_kwargs=_local_ray(workers))


def _local_ray(workers: int) -> dict[str, Any]:
    """A local Ray with ``workers`` CPUs and no dashboard."""
    return {"num_cpus": workers, "include_dashboard": False}


def _local_ray_environment() -> None:
    """Keep a local Ray on loopback, without a usage report or an auth-token file in the home directory.

    Ray binds its node to the host's address unless told otherwise, and it
    reads these settings when it is imported, so they are set before that
    (unless the operator set them, or Ray is already imported).
    """
    for name, value in (
        ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0"),  # the node address becomes 127.0.0.1
        ("RAY_AUTH_MODE", "disabled"),
        ("RAY_USAGE_STATS_ENABLED", "0"),
    ):
        os.environ.setdefault(name, value)


def _cluster_size(runner: str, address: str, device: str) -> tuple[int, bool]:
    """How many shard tasks the cluster at ``address`` runs at once, and whether they get GPUs."""
    if runner == "dask":
        return _dask_size(address), device.startswith("cuda")
    return _ray_size(address, device)


def _dask_size(address: str) -> int:
    try:
        from distributed import Client
    except ImportError as exc:
        raise ConfigError(_MISSING.format(runner="dask", packages="prefect-dask and distributed")) from exc
    try:
        with Client(address, timeout="10s", set_as_default=False) as client:
            threads = sum(client.nthreads().values())
    except OSError as exc:
        raise TransientError(
            f"no Dask scheduler answered at {address!r} ({exc}); start one (dask scheduler) and its "
            "workers, or drop --address to start a local cluster"
        ) from exc
    if threads == 0:
        raise TransientError(f"the Dask scheduler at {address!r} has no workers yet; start some and retry")
    return threads


def _ray_size(address: str, device: str) -> tuple[int, bool]:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(_MISSING.format(runner="ray", packages="prefect-ray and ray")) from exc
    with _ray_session(address):
        resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0)) if device != "cpu" else 0
    return (gpus or int(resources.get("CPU", 1))), gpus > 0


@contextmanager
def _ray_session(address: str) -> Any:
    import ray

    ray.init(address=address, namespace="prefect", logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()
