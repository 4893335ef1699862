"""The worker side of a run: from a :class:`RunRef` and a shard id to a merged shard.

A shard task receives only the run reference and a shard id. The worker
process does the rest in its own environment, and keeps what is expensive
in a per-process :class:`WorkerCache`:

* the **model**, loaded once per (name, device) and reused by every later
  shard of any run (the Ray-actor / datatrove-rank pattern), as long as its
  version is the one last described here (:meth:`WorkerCache.refresh`);
* per run, the **source**, the **ledger** and the **sink** (together a
  :class:`~shardwise.results.ResultStore`), and the run's **record and
  plan**, read from the ledger, never planned again, so every worker scores
  exactly the shard boundaries the run stored.

Before scoring, the worker checks the model and precision against what the
run recorded (:mod:`shardwise.pipeline.worker_checks`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from shardwise.batch.config import EngineConfig
from shardwise.batch.device_lease import leased_device
from shardwise.cost.budget import Budget
from shardwise.cost.prices import Pricing
from shardwise.errors import ConfigError, TransientError
from shardwise.model import Loaded, ModelInfo, ModelSpec
from shardwise.model.converted import ConvertedCache, kept_in
from shardwise.model.generation import with_generation
from shardwise.model.kinds import claiming
from shardwise.model.run_bound import bind
from shardwise.pipeline.chunks import DEFAULT_CHUNK_ROWS, ChunkConfig
from shardwise.pipeline.destination import ledger_url, results_place
from shardwise.pipeline.shard import ShardOutcome, score_shard
from shardwise.pipeline.spec import ModelChoice, Resolver, RunRef, RunSpec, as_is
from shardwise.pipeline.worker_checks import check_outputs, check_precision, check_version
from shardwise.precision import Precision
from shardwise.precision.calibration import CalibrationCache, measured_agreement
from shardwise.records import RunRecord
from shardwise.results import Ledger, ResultStore
from shardwise.retry_policy import Outage, RetryPolicy, retry_step
from shardwise.secrets.by_reference import same_location
from shardwise.sinks import Layout
from shardwise.sources import (
    KeyedSource,
    Source,
    SourcePlan,
    is_keyed,
    open_source,
)
from shardwise.sources.base import KeyType, Shard

__all__ = ["Catalogue", "WorkerCache", "chosen_spec", "open_spec_source", "score_ref_shard"]

Catalogue = Callable[[str], ModelSpec]
"""Looks a model up by name (``models.get_spec``): the engine does not import the catalogue itself."""

_MAX_RUNS = 4
_DEFAULT_RETRY = RetryPolicy()
"""The retry policy of a model loaded outside a run (a warm-up, a test): a run passes its own."""


def open_spec_source(spec: RunSpec, resolve: Resolver, plan: SourcePlan | None = None) -> Source:
    """The spec's source adapter (of the registered kind that claims it), its connection resolved here.
    With the run's stored ``plan``, the kind is the plan's instead of one found by listing the location."""
    return open_source(
        resolve(spec.source.location),
        table=spec.source.table,
        key=spec.source.key,
        text_column=spec.source.text_column,
        input_columns=spec.input_columns(),
        image_column=spec.source.image_column,
        image_access=spec.image_access,
        kind=None if plan is None else plan.kind,
        kind_options=spec.source.kind_options(),  # the run's own: a resume may raise its query timeout
        retry=spec.run.retry,
    )


@dataclass
class _Run:
    """What a worker holds for one run: its stored record and plan, a source and a results store."""

    record: RunRecord
    plan: SourcePlan
    source: Source
    store: ResultStore

    def shard(self, shard_id: int) -> Shard:
        for shard in self.plan.shards:
            if shard.shard_id == shard_id:
                return shard
        raise ConfigError(
            f"shard {shard_id} is not in the stored plan of run {self.record.run_id!r} "
            f"(shards 0 to {len(self.plan.shards) - 1}); pass a shard id of that plan"
        )

    def close(self) -> None:
        try:
            self.source.close()
        finally:
            self.store.close()


def chosen_spec(
    catalogue: Catalogue, choice: ModelChoice, resolve: Resolver, retry: RetryPolicy
) -> ModelSpec:
    """The catalogue's spec for ``choice``: generating with its settings when given, bound to its kind's
    options, ``resolve`` for the secrets they name, and ``retry`` (see :mod:`shardwise.model.run_bound`)."""
    spec = with_generation(catalogue(choice.name), choice.generation)
    return bind(spec, dict(choice.options), resolve, retry)


class WorkerCache:
    """Models and open runs of one worker process; safe to share between its threads.

    ``loads`` counts model loads, so a test (or a curious operator) can see
    that a worker that ran ten shards loaded its model once. At most
    ``max_runs`` runs stay open; the least recently used is closed.
    """

    def __init__(
        self,
        catalogue: Catalogue,
        max_runs: int = _MAX_RUNS,
        calibration: CalibrationCache | None = None,
        resolve: Resolver = as_is,
        converted: ConvertedCache | None = None,
    ) -> None:
        self._catalogue = catalogue
        self._resolve = resolve
        """How this process reads the secrets a model's options name (a remote model's key reference)."""
        self._max_runs = max_runs
        self.calibration = calibration
        """Where the guard's figures are kept between processes (None: measured once per process)."""
        self.converted = converted
        """Where a model that must be converted to load (a GGUF file) is kept converted between processes
        (None: converted at each load)."""
        self._lock = threading.Lock()
        self._models: dict[tuple[ModelChoice, str, RetryPolicy], Loaded] = {}
        self._agreements: dict[tuple[str, str, str, bool], tuple[float, bool]] = {}
        self._infos: dict[ModelChoice, ModelInfo] = {}
        self._runs: OrderedDict[tuple[str, RunSpec], _Run] = OrderedDict()
        self.loads = 0

    def model(
        self, choice: ModelChoice, device: torch.device, retry: RetryPolicy = _DEFAULT_RETRY
    ) -> tuple[Loaded, float]:
        """The model on ``device``, and the seconds spent loading it now (0.0 when it was loaded already).

        A generator loads once per generation settings, a remote model once per options and retry policy
        (the run's, which bounds an outage of its endpoint); see :meth:`spec`.
        """
        key = (choice, str(device), retry)
        described = self.info(choice)
        with self._lock:
            found = self._models.get(key)
            if found is not None and found.version == described.version:
                return found, 0.0
            started = time.perf_counter()
            model = kept_in(self.spec(choice, retry), self.converted).load(device)
            check_outputs(model, described)
            self._models[key] = model
            self.loads += 1
            return model, time.perf_counter() - started

    def info(self, choice: ModelChoice) -> ModelInfo:
        """The model's description (no weights on a device), read once per process."""
        with self._lock:
            if choice not in self._infos:
                self._infos[choice] = self.spec(choice).describe()
            return self._infos[choice]

    def refresh(self, choice: ModelChoice, described: ModelInfo) -> bool:
        """Take ``described``, model ``name``'s description read just now, as current; True if it changed.

        Each run's planning calls this, so a long-lived process (``shardwise
        serve``'s warm runs) never serves a model whose files changed since it
        loaded them: another version, and :meth:`model` loads it again.
        """
        with self._lock:
            before = self._infos.get(choice)
            self._infos[choice] = described
        return before is not None and before.version != described.version

    def spec(self, choice: ModelChoice, retry: RetryPolicy = _DEFAULT_RETRY) -> ModelSpec:
        """The catalogue's spec for the chosen model: generating with its settings when given, bound to its
        kind's options, this process's resolver and ``retry`` (see :mod:`shardwise.model.run_bound`)."""
        return chosen_spec(self._catalogue, choice, self._resolve, retry)

    def agreement(self, model: Loaded, precision: Precision, pairs: bool = False) -> float:
        """The guard's agreement of ``model`` in ``precision`` with float32, measured once per process,
        or read from :attr:`calibration` where an earlier process stored it."""
        return self.guarded(model, precision, pairs)[0]

    def guarded(self, model: Loaded, precision: Precision, pairs: bool = False) -> tuple[float, bool]:
        """:meth:`agreement`, and whether it came from :attr:`calibration` rather than a measurement."""
        key = (f"{model.name}@{model.version}", str(model.device), precision, pairs)
        with self._lock:
            if key not in self._agreements:
                self._agreements[key] = measured_agreement(self.calibration, model, precision, pairs)
            return self._agreements[key]

    def run(self, ref: RunRef, model: Loaded, resolve: Resolver) -> _Run:
        """The open run behind ``ref``, built on first use from the ledger in the run's results database."""
        key = (ref.run_id, ref.spec)
        with self._lock:
            if key in self._runs:
                self._runs.move_to_end(key)
                found = self._runs[key]
            else:
                found = self._runs[key] = _open_run(ref, model, resolve)
                while len(self._runs) > self._max_runs:
                    self._runs.popitem(last=False)[1].close()
        check_version(found.record, model)
        check_precision(found.record, model, ref.spec, self)
        return found

    def release(self, run_id: str) -> None:
        """Close what this process holds for ``run_id`` (a finished run); a later shard reopens it."""
        with self._lock:
            done = [key for key in self._runs if key[0] == run_id]
            closing = [self._runs.pop(key) for key in done]
        for run in closing:
            run.close()

    def close(self) -> None:
        with self._lock:
            closing, self._runs = list(self._runs.values()), OrderedDict()
            self._models.clear()
        for run in closing:
            run.close()


def _open_run(ref: RunRef, model: Loaded, resolve: Resolver) -> _Run:
    ledger = Ledger(ledger_url(ref.spec, resolve), timeout_s=ref.spec.run.retry.db_timeout_s)
    try:
        record, plan = ledger.load(ref.run_id)
        check_version(record, model)
        key_type: KeyType = "int" if plan.params.get("key_type") == "int" else "text"
        sink = results_place(ref.spec, resolve(ref.spec.results_location)).open(
            Layout(tuple(model.outputs), key_type)
        )
        store = ResultStore(ledger, sink)
    except BaseException:
        ledger.close()
        raise
    try:
        table = open_spec_source(ref.spec, resolve, plan)
        if plan.identity != table.identity and same_location(plan.identity, table.identity):
            plan = replace(plan, identity=table.identity)  # recorded by reference, read by value
        # A redrive's stored shards name their keys: read them by key.
        source: Source = KeyedSource(table, []) if is_keyed(plan) else table
    except BaseException:
        store.close()
        raise
    return _Run(record, plan, source, store)


def chunk_rows(spec: RunSpec, found: ModelSpec) -> int:
    """The rows a chunk of ``spec``'s run holds: the spec's (a budgeted run's, as its plan recorded it),
    else what the model's kind answers for ``found`` (a generator commits sooner, an image model holds
    fewer rows at once: :mod:`shardwise.pipeline.chunks`); a model no kind claims (one a caller's own
    catalogue made) gets :data:`DEFAULT_CHUNK_ROWS`."""
    if spec.chunk_rows is not None:
        return spec.chunk_rows
    kind = claiming(spec.model.name)
    return DEFAULT_CHUNK_ROWS if kind is None else kind.chunk_rows(found)


def score_ref_shard(
    ref: RunRef, shard_id: int, cache: WorkerCache, *, resolve: Resolver = as_is, outage: Outage | None = None
) -> ShardOutcome:
    """Score shard ``shard_id`` of the run behind ``ref`` on this worker, exactly once.

    The device comes from a host-wide lease (one worker per GPU, see
    :mod:`shardwise.batch.device_lease`); the model and the run come from
    ``cache``. A shard the ledger says is done is skipped.

    ``outage`` is the shard's retry clock on the run's policy
    (``ref.spec.run.retry``); a caller that tries the shard again passes the same
    one to each attempt, so that they share one deadline (None: a fresh one).
    A transient error that no step retried is counted on it and raised for
    the caller's next attempt, or, once the deadline has passed, turned into
    the :class:`~shardwise.errors.RetryDeadlineError` that ends the shard.
    """
    outage = outage or Outage(ref.spec.run.retry)
    try:
        return _score_ref_shard(ref, shard_id, cache, resolve, outage)
    except TransientError as exc:
        outage.failed()
        if outage.past_deadline():
            raise outage.give_up(f"shard {shard_id}", exc) from exc
        raise


def _score_ref_shard(
    ref: RunRef, shard_id: int, cache: WorkerCache, resolve: Resolver, outage: Outage
) -> ShardOutcome:
    if ref.threads is not None and torch.get_num_threads() != ref.threads:
        torch.set_num_threads(ref.threads)  # a share of the host's cores: workers must not oversubscribe
    with leased_device(ref.spec.run.device) as device:
        model, load_s = cache.model(ref.spec.model, device, ref.spec.run.retry)
        # The first attempt of a process reads the run's record and plan from the ledger.
        run = retry_step(lambda: cache.run(ref, model, resolve), what=f"open run {ref.run_id}", outage=outage)
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            return score_shard(
                source=run.source,
                plan=run.plan,
                shard=run.shard(shard_id),
                model=model,
                store=run.store,
                run=run.record,
                config=EngineConfig(max_tokens=ref.spec.run.max_tokens, precision=run.record.precision),  # type: ignore[arg-type]
                model_load_s=load_s,
                lease_s=ref.spec.run.lease_s,
                chunking=ChunkConfig(chunk_rows(ref.spec, cache.spec(ref.spec.model, ref.spec.run.retry))),
                outage=outage,
                pricing=Pricing(
                    run.record.model_name,
                    ref.spec.run.device_price_per_hour,
                    batch=cache.info(ref.spec.model).batch_priced,
                ),
                budget=Budget.of(ref.spec.run.budget_usd, ref.spec.run.budget_tokens),
            )
