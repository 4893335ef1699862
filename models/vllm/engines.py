"""The vLLM engines of one worker process: built once per model and options, kept, and dropped when
they fail.

A ``vllm.LLM`` takes tens of seconds to start (a process of its own, weights, KV cache), so each worker
process builds one per (model file or folder, engine options, device) and every generator over that
model shares it, whatever its prompt or sampling: those are per request. A window at a time uses an
engine (its lock), as vLLM's engine is not made for two callers.

vLLM is driven here step by step (``LLMEngine.step``) in a daemon thread, while the caller watches:
an engine whose process died, or that finishes no step for ``stall_timeout_s`` (hung), fails the window
with one :class:`~shardwise.errors.TransientError` (the run's retry policy retries it), and is dropped
from the cache and shut down, so the next window builds a new one. A hung step cannot be interrupted:
its thread is a daemon and is left behind, waiting on the dead engine. The process's engines are shut
down when it exits (its exit would otherwise wait on their processes forever).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from shardwise.errors import ConfigError, TransientError
from shardwise.models.vllm.options import INSTALL, VllmOptions
from shardwise.process.reaper import reaping

__all__ = [
    "EngineKey",
    "Request",
    "VllmEngine",
    "drop",
    "engine_for",
    "engine_pids",
    "engines_built",
    "model_paths",
    "shutdown_all",
]

_log = logging.getLogger(__name__)
_POLL_S = 0.5
"""How often the caller looks at a running window's progress and its engine's life."""


@dataclass(frozen=True)
class EngineKey:
    """What decides the engine a generator needs: the model's files, the options that build it, the device."""

    model: str
    tokenizer: str
    options: str
    device: str


@dataclass(frozen=True)
class Request:
    """One prompt for the engine: its id, token ids, and ``vllm.SamplingParams``."""

    request_id: str
    ids: Sequence[int]
    params: Any


@dataclass
class VllmEngine:
    """One ``vllm.LLM`` and what guards it: a lock (a window at a time) and whether it failed."""

    key: EngineKey
    llm: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    failed: str | None = None
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def generate(self, requests: Sequence[Request], stall_timeout_s: float) -> dict[str, Any]:
        """Every request's final ``RequestOutput``, by request id; raises a :class:`TransientError` (and
        drops this engine) when the engine dies or finishes no step for ``stall_timeout_s``."""
        with self.lock:
            if self.failed is not None:
                raise TransientError(f"vLLM engine for {self.key.model!r} failed earlier ({self.failed})")
            serial = next(self._ids)
            run = _Stepping(self.llm.llm_engine, [_renamed(r, serial) for r in requests])
            thread = threading.Thread(target=run, name="shardwise-vllm-steps", daemon=True)
            thread.start()
            while thread.is_alive():
                thread.join(_POLL_S)
                problem = self._problem(run, stall_timeout_s)
                if problem is not None:
                    self._fail(problem)
            if run.refused is not None:  # the engine is sound: only this window's requests were refused
                raise ConfigError(
                    f"vLLM refused a request for model {self.key.model!r}: {run.refused}; check the "
                    "generation settings (a JSON Schema vLLM cannot compile, a max_new_tokens beyond "
                    "max_model_len)"
                ) from run.refused
            if run.error is not None:
                self._fail(f"it raised {type(run.error).__name__}: {run.error}", run.error)
            return {name.split("/", 1)[1]: output for name, output in run.outputs.items()}

    def _problem(self, run: _Stepping, stall_timeout_s: float) -> str | None:
        resources = getattr(getattr(self.llm.llm_engine, "engine_core", None), "resources", None)
        if getattr(resources, "engine_dead", False):
            return "its engine process died"
        idle = time.monotonic() - run.progressed
        if run.error is None and idle > stall_timeout_s:
            return f"it finished no step for {idle:.0f} s (stall_timeout_s {stall_timeout_s:g})"
        return None

    def _fail(self, reason: str, cause: BaseException | None = None) -> None:
        self.failed = reason
        drop(self.key)
        raise TransientError(
            f"vLLM engine for model {self.key.model!r} failed: {reason}; it is dropped, and the next "
            "attempt builds a new one"
        ) from cause


class _Stepping:
    """A window's requests, added to the engine and stepped until all finish (run in its own thread)."""

    def __init__(self, engine: Any, requests: Sequence[Request]) -> None:
        self._engine, self._requests = engine, requests
        self.outputs: dict[str, Any] = {}
        self.error: BaseException | None = None
        """What failed the engine (it died, or a step raised)."""
        self.refused: Exception | None = None
        """What vLLM said refusing one of the requests as it was added (the engine is unharmed)."""
        self.progressed = time.monotonic()

    def __call__(self) -> None:
        from vllm.exceptions import VLLMClientError
        from vllm.sampling_params import RequestOutputKind

        try:
            for number, request in enumerate(self._requests):
                request.params.output_kind = RequestOutputKind.FINAL_ONLY
                prompt = {"prompt_token_ids": list(request.ids)}
                try:
                    self._engine.add_request(request.request_id, prompt, request.params)
                except (ValueError, TypeError, VLLMClientError) as exc:
                    self.refused = exc
                    self._engine.abort_request([r.request_id for r in self._requests[:number]])
                    return
                if number == 0 and len(self._requests) > 1:
                    # The first prompt alone first: its prefill fills the prefix cache, which the rest
                    # (sorted, so mostly sharing its system text and template) then hit; prompts that
                    # start in one step all compute their prefixes anew.
                    self._step()
            wanted = {r.request_id for r in self._requests}
            while wanted - self.outputs.keys():
                self._step()
        except BaseException as exc:  # handed to the caller, which raises it with the engine's name
            self.error = exc

    def _step(self) -> None:
        for output in self._engine.step():
            if output.finished:
                self.outputs[output.request_id] = output
        self.progressed = time.monotonic()


def _renamed(request: Request, serial: int) -> Request:
    """``request`` under an id unique in its engine: ``SERIAL/ID`` (ids repeat across windows)."""
    return Request(f"{serial}/{request.request_id}", request.ids, request.params)


_ENGINES: dict[EngineKey, VllmEngine] = {}
_LOCK = threading.Lock()
_GUARD = contextlib.ExitStack()
"""The :func:`~shardwise.process.reaper.reaping` guard of this process's engines, from the first built
until :func:`shutdown_all` has ended them all; ``_GUARDED`` holds an item while it runs."""
_GUARDED: list[bool] = []
_built = 0


def engines_built() -> int:
    """How many engines this process has built (a rebuilt one counts again)."""
    return _built


def engine_for(key: EngineKey, options: VllmOptions) -> VllmEngine:
    """This process's engine for ``key``, built now if there is none (or the last one failed)."""
    global _built
    with _LOCK:
        found = _ENGINES.get(key)
        if found is not None and found.failed is None:
            return found
        if not _GUARDED:
            # vLLM's engine process outlives this one when this one is killed (SIGKILL, OOM): a guard
            # kills what this process started from now on if it ends without standing the guard down.
            _GUARD.enter_context(reaping())
            _GUARDED.append(True)
        llm = _build(key, options)
        if _built == 0:
            # Python's exit joins the engine's process, which never ends unless it is shut down: without
            # this, a command whose run is done would wait forever. Registered after multiprocessing's
            # own exit hook, so it runs before it.
            atexit.register(shutdown_all)
        _built += 1
        engine = _ENGINES[key] = VllmEngine(key, llm)
        return engine


def shutdown_all(timeout_s: float = 60.0) -> None:
    """Drop every engine of this process and wait up to ``timeout_s`` for their processes to end."""
    with _LOCK:
        keys = list(_ENGINES)
    closing = [thread for key in keys if (thread := drop(key)) is not None]
    deadline = time.monotonic() + timeout_s
    for thread in closing:
        thread.join(max(0.0, deadline - time.monotonic()))
    if not any(thread.is_alive() for thread in closing):
        with _LOCK:
            if not _ENGINES and _GUARDED:
                _GUARD.close()  # every engine ended: the guard stands down, killing nothing
                _GUARDED.clear()


def engine_pids(key: EngineKey) -> list[int]:
    """The process ids of ``key``'s engine core (empty when none is built, or it runs in this process)."""
    with _LOCK:
        engine = _ENGINES.get(key)
    core = None if engine is None else getattr(engine.llm.llm_engine, "engine_core", None)
    manager = getattr(getattr(core, "resources", None), "engine_manager", None)
    return [int(p.pid) for p in getattr(manager, "processes", ())]


def drop(key: EngineKey) -> threading.Thread | None:
    """Forget ``key``'s engine and shut it down in the background (a hung one may not answer); the
    thread shutting it down, or None when there was no engine."""
    with _LOCK:
        engine = _ENGINES.pop(key, None)
    if engine is None:
        return None
    closing = threading.Thread(target=_shut, args=(engine.llm,), name="shardwise-vllm-shutdown", daemon=True)
    closing.start()
    return closing


def _shut(llm: Any) -> None:
    with contextlib.suppress(Exception):  # best effort: the engine is already given up on
        llm.llm_engine.engine_core.shutdown()


def _build(key: EngineKey, options: VllmOptions) -> Any:
    """A new ``vllm.LLM`` for ``key`` on its device."""
    try:
        from vllm import LLM
    except ImportError as exc:
        raise ConfigError(
            f"model {key.model!r} generates with engine vllm, which needs vLLM; {INSTALL}"
        ) from exc
    device = torch.device(key.device)
    arguments = options.llm_arguments(cpu=device.type != "cuda")
    started = time.perf_counter()
    shown = logging.getLogger("vllm").isEnabledFor(logging.INFO)  # vLLM's log (see shardwise.environment)
    with _visible(device, options.tensor_parallel_size), _quiet_children(not shown):
        try:
            llm = LLM(
                model=key.model,
                tokenizer=key.tokenizer,
                seed=0,
                disable_log_stats=True,
                generation_config="vllm",  # Shardwise's settings decide sampling, not the model's defaults
                use_tqdm_on_load=shown,  # its progress bar over the weights is part of its log
                **arguments,
            )
        except ValueError as exc:  # vLLM's refusal of a model or a setting
            raise ConfigError(
                f"vLLM refused model {key.model!r} with options {options.engine_key()}: {exc}"
            ) from exc
        except RuntimeError as exc:  # its engine process failed to start (memory, a device)
            raise TransientError(f"vLLM could not start an engine for model {key.model!r}: {exc}") from exc
    _log.info("vLLM engine for %s built in %.1f s", key.model, time.perf_counter() - started)
    return llm


@contextlib.contextmanager
def _visible(device: torch.device, tensor_parallel: int) -> Iterator[None]:
    """The engine's processes, spawned now, see the worker's GPU (``cuda:N``) and the next ones for
    tensor parallelism; the variable is put back once they are started. Nothing changes on a CPU."""
    if device.type != "cuda" or device.index is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = before.split(",") if before else [str(i) for i in range(torch.cuda.device_count())]
    chosen = shown[device.index : device.index + tensor_parallel]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
    try:
        yield
    finally:
        if before is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


_QUIET = {"PYTHONWARNINGS": "ignore", "TORCH_CPP_LOG_LEVEL": "ERROR"}
"""What the engine's processes, started with its log hidden, print no more of: Python's warnings
(deprecations inside vLLM, a leaked shared memory notice at exit) and torch's C++ warnings."""


@contextlib.contextmanager
def _quiet_children(quiet: bool) -> Iterator[None]:
    """With ``quiet``, the engine's processes, spawned now, start with :data:`_QUIET` (where the user set
    none of them); the variables are put back once they are started."""
    added = {name: value for name, value in _QUIET.items() if quiet and name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def model_paths(folder: Path, pretrained: Mapping[str, Any]) -> tuple[str, str]:
    """What vLLM loads for a causal source's ``from_pretrained`` arguments: the model (a folder, or a
    GGUF file, whose tokenizer vLLM reads from the file too) and its tokenizer."""
    gguf = pretrained.get("gguf_file")
    model = str(folder if gguf is None else folder / gguf)
    return model, model
