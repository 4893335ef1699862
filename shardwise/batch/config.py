"""Engine settings: one frozen dataclass that checks itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from shardwise.errors import ConfigError
from shardwise.precision import Requested, check_precision, resolve_precision

if TYPE_CHECKING:
    import torch

    from shardwise.model import OutputColumn

__all__ = ["EngineConfig"]

# Defaults per device kind, measured rather than guessed (see bench/engine.py):
# on a CPU small batches of near-equal length keep the working set in cache,
# on a GPU large batches are needed to fill the device. Padding to a multiple
# of 8 lets CUDA pick tensor-core kernels; on a CPU it would only add work.
# ``pad_slack`` is a batch's fixed cost expressed in tokens: small on a CPU,
# where compute is per token, large on a GPU, where launching a forward pass
# costs as much as thousands of tokens.
_DEFAULTS = {
    "cpu": {"max_tokens": 2048, "max_batch_size": 128, "pad_to_multiple": 1, "pad_slack": 32},
    "cuda": {"max_tokens": 32768, "max_batch_size": 512, "pad_to_multiple": 8, "pad_slack": 8192},
}


@dataclass(frozen=True)
class EngineConfig:
    """How the engine cuts, pads and prefetches batches.

    ``None`` means "the default for the device", filled in by :meth:`for_device`.
    ``max_tokens`` bounds the padded area of a batch (rows x longest row), which
    is what memory and compute scale with. ``pad_slack`` is the fixed cost of one
    more batch, in tokens: rows go into another batch only where that saves
    more than ``pad_slack`` tokens of padding (see
    :func:`~shardwise.batch.batching.cut_batches`). ``window_rows`` is how many rows
    are read, sorted by length and scored before the next rows are read:
    memory is bounded by it however large the input is. ``precision`` is ``fp32``,
    ``bf16``, ``fp16``, ``int8`` (CPU only) or ``auto`` (the fastest the device computes natively,
    see :mod:`shardwise.precision`); a bare engine defaults to float32, the
    pipeline to ``auto`` behind an accuracy guard.
    """

    max_tokens: int | None = None
    max_batch_size: int | None = None
    pad_to_multiple: int | None = None
    pad_slack: int | None = None
    window_rows: int = 8192
    prefetch_depth: int = 2
    precision: Requested = "fp32"

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_batch_size", "pad_to_multiple"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(
                    f"{name} must be a positive integer or None (device default), got {value!r}"
                )
        if not isinstance(self.window_rows, int) or self.window_rows < 1:
            raise ConfigError(f"window_rows must be a positive integer, got {self.window_rows!r}")
        if not isinstance(self.prefetch_depth, int) or self.prefetch_depth < 1:
            raise ConfigError(
                f"prefetch_depth must be >= 1 (2 = double buffering), got {self.prefetch_depth!r}"
            )
        check_precision(self.precision)

    def for_device(
        self,
        device: torch.device,
        outputs: Sequence[OutputColumn] = (),
        model_defaults: Mapping[str, Mapping[str, int]] | None = None,
    ) -> EngineConfig:
        """Fill every unset field with the default for ``device``'s kind; resolve ``auto`` precision
        for a model with ``outputs`` (label outputs keep float32).

        ``model_defaults`` (a model's ``engine_defaults``, by device kind) replaces these defaults where
        its batches cost otherwise: a generator's batch costs a forward pass per new token, so
        splitting one to save padding costs far more than the padding.
        """
        kind = "cuda" if device.type == "cuda" else "cpu"
        defaults = {**_DEFAULTS[kind], **(model_defaults or {}).get(kind, {})}
        return replace(
            self,
            max_tokens=self.max_tokens or defaults["max_tokens"],
            max_batch_size=self.max_batch_size or defaults["max_batch_size"],
            pad_to_multiple=self.pad_to_multiple or defaults["pad_to_multiple"],
            pad_slack=defaults["pad_slack"] if self.pad_slack is None else self.pad_slack,
            precision=resolve_precision(self.precision, device, outputs),
        )
