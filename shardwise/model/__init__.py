"""The contract between the engine and a model from the catalogue (``models/``).

Every model kind (text encoders, classifiers and cross-encoders today;
generators and image models next) is the same four steps, and the engine
knows nothing else about it:

* ``prepare(value) -> item``, on the CPU, in the prefetch thread: tokenise a
  text, render a prompt, decode an image. An item has a **cost** (an int:
  tokens for text, prompt plus new tokens for generation, pixels for an
  image) that the engine orders and cuts batches by, and says whether it was
  **truncated**. A row that cannot be prepared raises
  :class:`~shardwise.errors.InputError` and becomes a dead letter.
* ``collate(items, multiple) -> batch``: padding is the model's business
  (right padding for encoders, left for decoder-only models). A batch is a
  :class:`DeviceBatch`: the engine pins it and copies it to the device ahead
  of time.
* ``run(batch) -> tensor`` on the device, one row per item.
* ``to_columns(outputs) -> columns``: the outputs, on the CPU, as one numpy
  array per declared :class:`OutputColumn`. A model that judges its outputs
  (a generator checking JSON against a schema) may add the array
  :data:`REJECTED`: per row None, or the :class:`~shardwise.errors.InputError`
  that makes the row a dead letter though it ran. An int column declared a
  **count** (tokens generated) is summed by the engine and the run.

A model may also carry ``engine_defaults``, by device kind (``{"cpu": {...},
"cuda": {...}}``), replacing the engine's default ``max_tokens``,
``max_batch_size``, ``pad_to_multiple`` or ``pad_slack`` where its batches cost
otherwise (a generator's: see :mod:`models.hf.causal.model`); a run's own settings
still win.

A model may also have ``prepare_many(values) -> list[Item | InputError]``: it
prepares a whole window's values at once (one item, or the InputError that
makes the row a dead letter, per value, in input order). Image models use it
to decode in a pool of threads; without it the engine calls ``prepare`` row by
row.

A model kind that batches, schedules and pads by itself (an inference engine
such as vLLM, a remote endpoint taking many requests at once) implements
:class:`SelfBatching` instead of the four steps: it is given a whole window
of rows' values at once (a chunk's worth: the rows one commit holds) and
returns one outcome per value, in input order: the row's output values, or
the :class:`~shardwise.errors.InputError` that makes it a dead letter. The
engine then does no preparing, ordering, padding or prefetching of its own;
everything around the model (shards, chunks committed exactly once, dead
letters, lineage, counts) is the same. Such a kind arrives as one folder
under ``models/`` or as a plug-in. One whose work on a window outlives its
process (a provider's Batch API) is also
:class:`~shardwise.model.recorded.Recorded`: the engine hands it the
window's keys and the run's book, where it records what it submitted and
finds it again on resume.

A catalogue entry is a :class:`ModelSpec`; loading it gives a :class:`Model`
bound to one device. :meth:`ModelSpec.describe` gives its :class:`ModelInfo`
without loading the weights onto a device, so a CPU-only flow process can
plan a GPU run. The description says what the model takes (``inputs``: texts,
pictures, or both), so that a run giving it anything else (an image column to
a text model, a text column to an image model, a binary column of pictures
read as text) is refused before it starts, rather than dead-lettering every row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args, runtime_checkable

from shardwise.errors import ConfigError, InputError

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the package supports 3.10
    import numpy as np
    import torch
    from typing_extensions import Self

__all__ = [
    "IMAGES",
    "REJECTED",
    "TEXT",
    "DeviceBatch",
    "Encoding",
    "InputKind",
    "Item",
    "Loaded",
    "Model",
    "ModelInfo",
    "ModelInputs",
    "ModelSpec",
    "OutputColumn",
    "PromptCounter",
    "PromptCounting",
    "PromptItem",
    "SelfBatching",
    "TextInput",
]

TextInput = str | tuple[str, str]
"""A text model's input once checked: a text, or a ``(text, text_pair)`` pair.

Pairs feed two-text models such as cross-encoders; a run gives either texts
or pairs, never a mix, and only to a model whose :attr:`ModelInfo.pairs` is true.
"""


REJECTED = "!rejected"
"""The optional entry of :meth:`Model.to_columns` naming rows that ran and failed (see the module
docstring); not an identifier, so no output column can take the name."""


class Item(Protocol):
    """One prepared row: what the engine needs of it is its cost and whether it was cut."""

    @property
    def cost(self) -> int:
        """What the row costs in the unit the model's batches are budgeted in (tokens, pixels), >= 1."""
        ...

    @property
    def truncated(self) -> bool:
        """The input was cut to the model's limit, so only part of it was scored."""
        ...


@runtime_checkable
class PromptItem(Protocol):
    """A generator's prepared row, which a plan counts exactly (see :mod:`shardwise.pipeline.estimate`):
    its prompt's tokens as the run will count them, and the most tokens it may generate."""

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def max_new_tokens(self) -> int: ...


@runtime_checkable
class PromptCounter(Protocol):
    """What counts the rows' prompt tokens of a model that batches by itself, before a run and without
    loading it (no engine built, no endpoint asked): see :mod:`shardwise.pipeline.estimate`."""

    @property
    def estimated(self) -> str | None:
        """None when the count is the run's own (the model's tokenizer and prompt rendering); else the
        rule that estimates it, in words (a remote model's tokenizer is the server's)."""
        ...

    def prompt(self, value: object) -> PromptItem:
        """A row's prompt tokens and cap; raises :class:`~shardwise.errors.InputError` for a row the run
        would make a dead letter."""
        ...


@runtime_checkable
class PromptCounting(Protocol):
    """A spec whose model batches by itself (vLLM, a remote endpoint) and whose prompts a plan counts."""

    def prompt_counter(self) -> PromptCounter | None:
        """The counter of the prompts its loaded model will send, or None when loading counts them
        (``prepare``) or nothing does."""
        ...


class DeviceBatch(Protocol):
    """A collated batch on the host, as the engine stages it: pinned, then copied to the device."""

    @property
    def padded_cost(self) -> int:
        """The cost computed for the batch, padding included (for text: rows x padded width)."""
        ...

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """Every tensor of the batch, so the engine can keep their memory alive across streams."""
        ...

    def pin_memory(self) -> Self:
        """The batch in page-locked host memory (itself when it already is), for an asynchronous copy."""
        ...

    def to(self, device: torch.device, *, non_blocking: bool = False) -> Self:
        """The same batch on ``device``."""
        ...


@dataclass(frozen=True, slots=True)
class Encoding:
    """A text model's :class:`Item`: the token ids of one text, special tokens included, already cut."""

    ids: list[int]
    truncated: bool
    type_ids: list[int] | None = None
    """Segment ids (BERT's ``token_type_ids``): 0 for the text, 1 for its pair; None when unused."""

    @property
    def cost(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """A text model's :class:`DeviceBatch`: int64 tensors, rows by width, padded on the right.

    ``attention_mask`` is None when no row is padded; ``token_type_ids`` (the
    segment ids of text pairs) is None unless the encodings carried
    :attr:`Encoding.type_ids`.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None = None
    token_type_ids: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def padded_cost(self) -> int:
        return int(self.input_ids.numel())

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors that are set, input ids first."""
        return tuple(t for t in (self.input_ids, self.attention_mask, self.token_type_ids) if t is not None)

    def pin_memory(self) -> ModelInputs:
        return self if self.input_ids.is_pinned() else self.map(lambda t: t.pin_memory())

    def to(self, device: torch.device, *, non_blocking: bool = False) -> ModelInputs:
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> ModelInputs:
        """Apply ``fn`` to every tensor that is set."""
        mask, types = self.attention_mask, self.token_type_ids
        return ModelInputs(
            fn(self.input_ids), None if mask is None else fn(mask), None if types is None else fn(types)
        )


@dataclass(frozen=True, slots=True)
class OutputColumn:
    """One result column a model produces. ``dim`` is set for vectors only.

    ``json`` values are any JSON value (dicts, lists, strings...): ``jsonb`` in
    PostgreSQL, JSON text elsewhere.

    ``count`` marks an ``int`` column whose sum over rows means something, such
    as a generator's ``prompt_tokens`` and ``completion_tokens``: runs then
    report its total and its rate per second (see :mod:`shardwise.model.counts`).
    """

    name: str
    kind: Literal["vector", "float", "int", "text", "json"]
    dim: int | None = None
    count: bool = False


InputKind = Literal["text", "image"]
"""What a model scores: texts (``str``, or bytes holding UTF-8 text), or pictures (an
:class:`~shardwise.model.binary_value.BinaryValue`, or the bytes of an image file)."""

TEXT: frozenset[InputKind] = frozenset({"text"})
IMAGES: frozenset[InputKind] = frozenset({"image"})


@dataclass(frozen=True)
class ModelInfo:
    """What planning needs of a model: who it is, what it takes and what it writes; no weights, no device."""

    name: str
    version: str
    """The same content hash that :attr:`Model.version` gives once loaded."""
    outputs: tuple[OutputColumn, ...]
    max_length: int
    pairs: bool = False
    """Whether the model scores ``(text, text_pair)`` inputs (``--text-pair-column``)."""
    inputs: frozenset[InputKind] | None = None
    """What it scores: :data:`TEXT`, :data:`IMAGES`, or both (CLIP embeds texts and pictures in one
    space). A run whose source gives anything else is refused before it starts, in one line (see
    :mod:`shardwise.pipeline.model_inputs`). None: not declared (a plug-in written before this
    field), so no run is refused for its inputs, and rows it cannot take become dead letters."""
    batches_itself: bool = False
    """Whether the loaded model batches by itself (:class:`SelfBatching`: an engine such as vLLM, or a
    remote endpoint). It computes in its own precision, which its settings say (vLLM's ``dtype``), so a
    run's precision does not apply: ``auto`` is float32, Shardwise's cast, and nothing else is taken."""
    batch_priced: bool = False
    """Whether its calls go through a provider's Batch API (a remote model with ``--batch-api``), so a
    run prices its tokens at the provider's batch prices (see :mod:`shardwise.cost.prices`)."""

    def __post_init__(self) -> None:
        if self.inputs is None:
            return
        kinds = get_args(InputKind)
        if not isinstance(self.inputs, frozenset) or not self.inputs or not self.inputs <= set(kinds):
            raise ConfigError(
                f"model {self.name!r}: inputs must be a non-empty frozenset of {', '.join(map(repr, kinds))} "
                f"(what the model scores), or None when undeclared; got {self.inputs!r}"
            )


@runtime_checkable
class Model(Protocol):
    """A model loaded onto one device: prepare rows, collate items, run batches, name the columns."""

    name: str
    version: str
    """Content hash of the weights, config and tokenizer: equal across loads of the same files."""
    max_length: int
    """The longest input it takes (tokens for text, special tokens included); longer ones are cut."""
    device: torch.device
    outputs: tuple[OutputColumn, ...]

    def prepare(self, value: object) -> Item:
        """One row's value (a text, a :class:`~shardwise.model.text.Inputs`, bytes...) as an item, on the CPU.

        Raises :class:`~shardwise.errors.InputError`, saying why, for a value
        it cannot score: that row becomes a dead letter and the run goes on.
        """
        ...

    def collate(self, items: Sequence[Any], multiple: int = 1) -> DeviceBatch:
        """One host batch of ``items`` (made by :meth:`prepare`), in their order, padded to the largest only.

        ``multiple`` asks for the padded size to be rounded up to a multiple
        of it (8 on CUDA, for tensor-core kernels); a model whose items all
        have one size may ignore it.
        """
        ...

    def run(self, batch: Any) -> torch.Tensor:
        """Score one batch (made by :meth:`collate`, moved to :attr:`device`).

        Gives a tensor on the device with one row per item, in the batch's order.
        """
        ...

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        """Turn :meth:`run`'s outputs, on the CPU (floats as float32), into one array per output column.

        It may add :data:`REJECTED` (an object array: None, or an
        :class:`~shardwise.errors.InputError` per row) for rows whose output is unusable.
        """
        ...


@runtime_checkable
class SelfBatching(Protocol):
    """A model that batches by itself: given a window of values, one outcome per value, in input order."""

    name: str
    version: str
    max_length: int
    device: torch.device
    outputs: tuple[OutputColumn, ...]

    def score_window(self, values: Sequence[object]) -> Sequence[Mapping[str, Any] | InputError]:
        """Score ``values`` (texts, :class:`~shardwise.model.text.Inputs`, ...) together.

        Returns as many outcomes as values, in their order: a mapping with a value for each declared
        output column, or the :class:`~shardwise.errors.InputError` saying why that row cannot be scored
        (it becomes a dead letter; the others are committed). An error that concerns every row (the
        engine or endpoint is down) is raised, and the window is retried by the run's policy.
        """
        ...


Loaded = Model | SelfBatching
"""A model loaded onto a device: one the engine batches (:class:`Model`), or one that batches itself."""


@runtime_checkable
class ModelSpec(Protocol):
    """A catalogue entry: a name, and how to load the model onto a device."""

    @property
    def name(self) -> str:
        """The name results record as ``model_name`` (a frozen dataclass field is fine)."""
        ...

    def describe(self) -> ModelInfo:
        """Name, version, outputs and max length, read without putting weights on a device."""
        ...

    def load(self, device: torch.device) -> Loaded:
        """Load weights onto ``device`` in eval mode."""
        ...
