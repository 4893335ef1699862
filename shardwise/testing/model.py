"""The model contract: what every model must do for the engine (:mod:`shardwise.model`), as checks on any.

Each check takes a :class:`ModelSample`: a model's name (what ``--model`` takes) and ``inputs(n)``,
``n`` values the model scores (texts of varied lengths by default; pictures for a model that declares
image inputs). The model is loaded on the CPU and run through the engine as a worker runs it. The
checks, in :data:`MODEL_CHECKS`, raise :class:`ContractBroken` naming the guarantee:

- ``input order``: outputs come back in input order, each row's its own: the same as scoring that row
  alone, whichever batch the engine put it in, with a value for every declared output;
- ``batching invariance``: small batches and windows give the outputs one large batch gives (floats to
  within 2e-5);
- ``empty input``: no rows give no results, and no error.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.testing.broken import expect

if TYPE_CHECKING:
    from shardwise.batch.config import EngineConfig
    from shardwise.batch.engine import RowResult

__all__ = ["MODEL_CHECKS", "ModelSample", "images", "sample_for", "texts"]

_ATOL = 2e-5


def texts(n: int) -> list[str]:
    """``n`` texts of varied lengths (1 to 60 words), the same every call."""
    rng = random.Random(n)
    words = ["alpha", "beta", "gamma", "delta", "shard", "token", "übung", "x"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(n)]


def images(n: int) -> list[bytes]:
    """``n`` PNG pictures of varied sizes and colours, the same every call (needs Pillow)."""
    from PIL import Image

    rng = random.Random(n)
    pictures = []
    for _ in range(n):
        side = rng.choice([24, 40, 64])
        colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        out = io.BytesIO()
        Image.new("RGB", (side, side + rng.randrange(16)), colour).save(out, format="PNG")
        pictures.append(out.getvalue())
    return pictures


@dataclass(frozen=True)
class ModelSample:
    """A model by name, and ``inputs(n)``: ``n`` values it scores."""

    name: str
    inputs: Callable[[int], list[Any]] = texts
    loaded: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def model(self) -> Any:
        """The model loaded on the CPU, once per sample."""
        if "model" not in self.loaded:
            import torch

            from shardwise.models import get_spec

            self.loaded["model"] = get_spec(self.name).load(torch.device("cpu"))
        return self.loaded["model"]

    def run(self, rows: list[tuple[int, Any]], config: EngineConfig | None = None) -> list[RowResult]:
        from shardwise.batch.engine import Engine

        return list(Engine(self.model(), config).run(rows))


def check_input_order(sample: ModelSample, n: int = 12) -> None:
    from shardwise.batch.config import EngineConfig

    what = "input order"
    rows = list(enumerate(sample.inputs(n)))
    results = sample.run(rows, EngineConfig(max_batch_size=4, window_rows=8))
    keys = [r.key for r in results]
    expect(keys == [k for k, _ in rows], what, f"rows 0..{n - 1} came back as {keys}")
    outputs = {column.name for column in sample.model().outputs}
    for result in results:
        expect(result.values is not None, what, f"row {result.key} was not scored: {result.error}")
        assert result.values is not None
        expect(
            set(result.values) == outputs,
            what,
            f"row {result.key} has outputs {sorted(result.values)}, not the declared {sorted(outputs)}",
        )
        (alone,) = sample.run([rows[keys.index(result.key)]])
        differs = _differs(result.values, alone.values or {})
        expect(
            differs is None,
            what,
            f"row {result.key} scored in a batch differs from it scored alone "
            f"({differs}): outputs are not each row's own",
        )


def check_batching_invariance(sample: ModelSample, n: int = 24) -> None:
    from shardwise.batch.config import EngineConfig

    what = "batching invariance"
    rows = list(enumerate(sample.inputs(n)))
    large = sample.run(rows, EngineConfig(max_batch_size=n, window_rows=n))
    for config in (
        EngineConfig(max_batch_size=1, window_rows=1),
        EngineConfig(max_batch_size=3, window_rows=5),
    ):
        small = sample.run(rows, config)
        for one, other in zip(large, small, strict=True):
            differs = _differs(one.values or {}, other.values or {})
            expect(
                differs is None,
                what,
                f"row {one.key} scored in batches of {config.max_batch_size} differs "
                f"from it scored in one batch of {n}: {differs}",
            )


def check_empty_input(sample: ModelSample) -> None:
    from shardwise.batch.engine import Engine

    what = "empty input"
    run = Engine(sample.model()).run([])
    results = list(run)
    expect(results == [] and run.stats.rows == 0, what, f"no rows gave {len(results)} results")


MODEL_CHECKS: dict[str, Callable[[ModelSample], None]] = {
    "input order": check_input_order,
    "batching invariance": check_batching_invariance,
    "empty input": check_empty_input,
}
"""Every check of the model contract, by the guarantee it checks."""


def sample_for(name: str, folder: Path | None = None) -> ModelSample:
    """The sample of the model ``name``, loaded (a model that cannot load is refused here, as a
    ConfigError, before any check): pictures for a model that declares image inputs, else texts.
    ``folder`` is unused: a model writes nothing."""
    from shardwise.model import IMAGES
    from shardwise.models import get_spec

    info = get_spec(name).describe()
    sample = ModelSample(name, images if info.inputs == IMAGES else texts)
    sample.model()
    return sample


def _differs(one: Mapping[str, Any], other: Mapping[str, Any]) -> str | None:
    """What differs between two rows' outputs (floats to within 2e-5), or None."""
    for name in sorted(set(one) | set(other)):
        a, b = one.get(name), other.get(name)
        if isinstance(a, np.ndarray | float) or isinstance(b, np.ndarray | float):
            same = a is not None and b is not None and np.allclose(a, b, atol=_ATOL, rtol=1e-5)
        else:
            same = a == b if not isinstance(a, np.generic) else bool(np.all(a == b))
        if not same:
            return f"{name}: {_brief(a)} against {_brief(b)}"
    return None


def _brief(value: Any) -> str:
    text = np.array2string(value, threshold=4) if isinstance(value, np.ndarray) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
