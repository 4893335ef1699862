"""Any local Hugging Face causal language model directory (``…ForCausalLM``), as a text generator.

Each row's text fills the prompt template (:mod:`shardwise.model.generation`); with
the chat template on (``chat``: ``auto`` uses it when the tokenizer has one)
the prompt is the user's message, after the system text if any, and the
template's string already holds the special tokens; with it off the system
text and the prompt are joined by a blank line and tokenised with the
tokenizer's special tokens (a BOS). The row then costs its prompt tokens plus
``max_new_tokens``, which is what its KV cache holds at most, so the engine's
token budget is a KV-cache budget. A prompt that leaves fewer than
``max_new_tokens`` of the model's context is refused (a dead letter naming
the sizes) rather than cut: cutting from the left would drop the chat
header and system text, and from the right the question, so the model would
silently answer another prompt.

The results are ``generated_text`` (each completion decoded whole, special
tokens and NUL characters removed), ``finish_reason`` (``stop`` at an
end-of-sequence token, ``length`` at ``max_new_tokens``), ``prompt_tokens``
and ``completion_tokens`` (the end-of-sequence token not counted). With a
JSON Schema (``json_schema``) there is also ``parsed``, the completion's JSON
value; a completion that is not valid JSON under the schema makes its row a
dead letter (:mod:`shardwise.model.structured`), and with ``constrained`` decoding
is held to the schema (:mod:`models.hf.causal.grammar`). The version hashes the
directory's files and the generation settings.

:class:`HFGenerator` loads from any
:class:`~models.hf.causal.common.CausalSource`: this module's directory spec,
or a GGUF file (:mod:`models.gguf.spec`), which hands transformers other
``from_pretrained`` arguments and then generates the same way. With engine
``vllm`` in the settings a spec loads into
:class:`~models.vllm.VllmGenerator` instead, which renders prompts
with the same :class:`~models.hf.causal.prompt.PromptRenderer` and writes the same
columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from shardwise.batch.batching import CostBudget, cut_batches, order_by_cost
from shardwise.errors import ConfigError, OutputError
from shardwise.hashing import hash_files
from shardwise.model import REJECTED, TEXT, Loaded, ModelInfo
from shardwise.model.generation import GenerationSettings, placeholders
from shardwise.model.kinds import engine_of
from shardwise.model.structured import JsonSchema
from shardwise.models.hf.causal.attention import read_kv_in_place
from shardwise.models.hf.causal.chat_check import (
    SAMPLE_TEXT,
    chat_template_of,
    check_chat_template,
    specials_of,
)
from shardwise.models.hf.causal.common import (
    OUTPUTS,
    PARSED,
    CausalSource,
    causal_outputs,
    causal_version,
    chat_on,
    check_room,
)
from shardwise.models.hf.causal.decode import decode
from shardwise.models.hf.causal.grammar import JsonGuide
from shardwise.models.hf.causal.prompt import (
    Prompt,
    PromptBatch,
    PromptRenderer,
    chat_messages,
    load_tokenizer,
)
from shardwise.models.hf.files import VERSIONED, check_layout, read_json
from shardwise.models.hf.loaded import require_transformers

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the package supports 3.10
    from typing_extensions import Self

__all__ = [
    "OUTPUTS",
    "PARSED",
    "HFCausalSpec",
    "HFGenerator",
    "LocalCausalSpec",
    "chat_messages",
    "is_causal_lm",
]

_TAG = "causal-lm"
_FILES = (*VERSIONED, "generation_config.json", "chat_template.jinja", "special_tokens_map.json")


def is_causal_lm(config: Mapping[str, Any]) -> bool:
    """Whether ``config.json`` names a ``…ForCausalLM`` architecture."""
    architectures = config.get("architectures")
    return isinstance(architectures, list) and any(
        isinstance(a, str) and a.endswith("ForCausalLM") for a in architectures
    )


def _context_of(root: Path, config: Mapping[str, Any]) -> int:
    """The model's context in tokens: its position limit, else the tokenizer's ``model_max_length``."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        if isinstance(config.get(key), int) and config[key] > 0:
            return int(config[key])
    limit = read_json(root / "tokenizer_config.json").get("model_max_length")
    return int(limit) if isinstance(limit, int) and 0 < limit < 10**7 else 2048


def _has_chat_template(root: Path) -> bool:
    return bool(read_json(root / "tokenizer_config.json").get("chat_template")) or (
        (root / "chat_template.jinja").is_file()
    )


@dataclass(frozen=True)
class LocalCausalSpec:
    """A causal LM on local disk generating with ``generation``. ``name`` defaults to ``hf:<path>``.

    What every such spec shares: its fields, its description and how it loads
    (into :class:`HFGenerator`); a subclass says where the model's files are
    (:meth:`pretrained`), its chat template (:meth:`chat`), its context
    (:meth:`context`) and its version (:meth:`_version`).
    """

    path: Path
    name: str = ""
    generation: GenerationSettings = field(default_factory=GenerationSettings)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser().resolve())
        if not self.name:
            object.__setattr__(self, "name", f"hf:{self.path}")

    def describe(self) -> ModelInfo:
        """Read from the model's files and a hash of them and the settings; no weights are loaded."""
        context = self.context()  # first: it says what is wrong with the files, before hashing them
        outputs, itself = causal_outputs(self.generation), engine_of(self.generation.engine) is not None
        return ModelInfo(self.name, self._version(), outputs, context, inputs=TEXT, batches_itself=itself)

    def load(self, device: torch.device) -> Loaded:
        """The generator on ``device``: Shardwise's own loop (engine ``hf``), or its engine kind's
        (``vllm``: one that batches by itself)."""
        engine = engine_of(self.generation.engine)
        return HFGenerator(self, device) if engine is None else engine.load(self, device)

    def generating(self, settings: GenerationSettings) -> Self:
        return replace(self, generation=settings)

    def prompt_counter(self) -> PromptRenderer | None:
        """With an engine kind (``vllm``, which batches by itself), the prompts its generator will send, for
        a plan to count without building an engine; None with engine ``hf``, whose ``prepare`` counts them."""
        engine = engine_of(self.generation.engine)
        return None if engine is None else engine.prompt_counter(self)  # type: ignore[no-any-return]

    def chat(self) -> bool:
        """Whether prompts go through the tokenizer's chat template; refuses ``on`` without one."""
        raise NotImplementedError

    def chat_template(self) -> tuple[str | None, dict[str, Any]]:
        """The chat template's text (None without one) and the special tokens it is rendered with."""
        raise NotImplementedError

    def check_prompts(self) -> None:
        """With the chat template on, render it once over a stand-in row, as a run would, bounded (see
        :mod:`models.hf.causal.chat_check`): a broken or hostile template is refused before anything runs."""
        if not self.chat():
            return
        template, specials = self.chat_template()
        if template is None:
            return
        body = self.generation.prompt.format_map(
            dict.fromkeys(placeholders(self.generation.prompt), SAMPLE_TEXT)
        )
        check_chat_template(str(self.path), template, chat_messages(self.generation.system, body), specials)

    def pretrained(self) -> tuple[Path, dict[str, Any]]:
        """The folder and keyword arguments that transformers' ``from_pretrained`` loads both from."""
        raise NotImplementedError

    def context(self) -> int:
        """The context in tokens, checked against ``max_new_tokens`` (which must leave room for a prompt)."""
        raise NotImplementedError

    def _version(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class HFCausalSpec(LocalCausalSpec):
    """A local causal LM directory generating with ``generation``. ``name`` defaults to ``hf:<path>``."""

    def chat(self) -> bool:
        return chat_on(self.generation, _has_chat_template(self.path), str(self.path))

    def chat_template(self) -> tuple[str | None, dict[str, Any]]:
        return chat_template_of(self.path), specials_of(self.path)

    def pretrained(self) -> tuple[Path, dict[str, Any]]:
        return self.path, {"local_files_only": True}

    def context(self) -> int:
        check_layout(self.path)
        config = read_json(self.path / "config.json")
        if not is_causal_lm(config):
            raise ConfigError(
                f"model directory {str(self.path)!r}: config.json names architectures "
                f"{config.get('architectures')!r}, not a ...ForCausalLM; give a causal language model"
            )
        return check_room(self.name, self.generation, _context_of(self.path, config))

    def _version(self) -> str:
        return causal_version(_TAG, hash_files(self.path, _FILES), self.chat(), self.generation)


class HFGenerator:
    """A loaded causal LM: prompts in, decoded completions out (see the module docstring).

    Batches are continuous: at most :data:`KV_BUDGET` tokens of KV cache (prompt plus
    ``max_new_tokens`` a row) decode at once, and as rows finish the batch's waiting rows join
    (:func:`~models.hf.causal.decode.decode`). Its collate plans the prompts' passes: rows of similar
    prompt length, each pass padded only to its own longest (:data:`PREFILL`), which is what the
    batch's ``padded_cost`` counts. The engine hands it batches of up to four times that, cut
    by their cost alone: a split to save padding would cost a forward pass per new token, far more
    than the padding (an encoder's ``pad_slack`` made ``bench/generate.py`` run at 0.22x plain
    ``generate`` on a CPU). A run's ``--max-tokens`` bounds the batch, and so the cache too.
    """

    engine_defaults: Mapping[str, Mapping[str, int]] = {
        "cpu": {"max_tokens": 4 * 16384, "pad_slack": 2**31 - 1},
        "cuda": {"max_tokens": 4 * 65536, "pad_slack": 2**31 - 1},
    }
    KV_BUDGET: Mapping[str, int] = {"cpu": 16384, "cuda": 65536}
    """Tokens of KV cache decoding at once, by device kind."""
    PREFILL: Mapping[str, tuple[int, int]] = {"cpu": (4096, 64), "cuda": (65536, 4096)}
    """The prompts' passes by device kind: most tokens (rows x longest prompt) a pass, and what a
    pass costs in tokens beyond them (``pad_slack``): on a CPU a pass over a small model costs about
    as much as a few dozen tokens, on a GPU as thousands (kernel launches, an idle device)."""

    def __init__(self, spec: CausalSource, device: torch.device) -> None:
        require_transformers(spec.name)
        from transformers import AutoModelForCausalLM

        info = spec.describe()
        self.name, self.version, self.outputs = spec.name, info.version, info.outputs
        self.max_length, self.device = info.max_length, device
        self.settings = spec.generation
        folder, pretrained = spec.pretrained()
        self._tokenizer: Any = load_tokenizer(folder, pretrained)
        self.prompts = PromptRenderer(self.name, self.settings, spec.chat(), self._tokenizer, self.max_length)
        net: Any = AutoModelForCausalLM.from_pretrained(folder, **pretrained)
        self._net: Any = net.eval().to(device)
        read_kv_in_place(self._net, device)
        eos = self._net.generation_config.eos_token_id
        if eos is None:
            eos = self._tokenizer.eos_token_id
        eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        self._eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
        pad = self._tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else eos_ids[0] if eos_ids else 0)
        self._schema = self.settings.output_schema()
        self._guide = None
        if self._schema is not None and self.settings.constrained:
            vocab = int(self._net.get_output_embeddings().weight.shape[0])
            self._guide = JsonGuide(self.name, self._tokenizer, vocab, eos_ids, self._schema.text)

    def fields(self, value: object) -> dict[str, str]:
        """The prompt's placeholders filled from a row (see :meth:`PromptRenderer.fields`)."""
        return self.prompts.fields(value)

    def render(self, value: object) -> str:
        """The prompt for a row, as a string (the chat template applied when on)."""
        return self.prompts.render(value)

    def prepare(self, value: object) -> Prompt:
        """Render and tokenise a row's text; a dead letter when it leaves no room for the new tokens."""
        return self.prompts.prompt(value)

    def collate(self, items: Sequence[Prompt], multiple: int = 1) -> PromptBatch:
        """Pad the prompts on the left to their longest (rounded up to ``multiple``), so all end together."""
        width = max(len(item.ids) for item in items)
        width = -(-width // multiple) * multiple
        ids = torch.full((len(items), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, item in enumerate(items):
            if item.ids:
                ids[row, width - len(item.ids) :] = torch.tensor(item.ids, dtype=torch.long)
                mask[row, width - len(item.ids) :] = 1
        seeds = torch.tensor([item.seed for item in items], dtype=torch.long)
        return PromptBatch(ids, mask, seeds, self.settings.max_new_tokens, self._groups(items))

    def _groups(self, items: Sequence[Prompt]) -> tuple[tuple[int, ...], ...]:
        """The prompts' passes: rows ordered by prompt length, cut where one more pass costs less than
        the padding it saves (:data:`PREFILL`), so each pass pads only to its own longest prompt."""
        lengths = [len(item.ids) for item in items]
        order = order_by_cost(lengths)
        budget, slack = self.PREFILL["cuda" if self.device.type == "cuda" else "cpu"]
        spans = cut_batches([lengths[i] for i in order], CostBudget(budget), len(items), 1, slack)
        return tuple(tuple(order[start:stop]) for start, stop in spans)

    def run(self, batch: PromptBatch) -> torch.Tensor:
        budget = self.KV_BUDGET["cuda" if self.device.type == "cuda" else "cpu"]
        return decode(self._net, batch, self.settings, self._eos, self.pad_id, self._guide, budget)

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        """Decode each row's completion whole (token by token would split multi-byte characters)."""
        rows = outputs.tolist()
        texts = [
            self._tokenizer.decode(row[3 : 3 + row[1]], skip_special_tokens=True).replace("\x00", "")
            for row in rows
        ]
        columns = {
            "generated_text": np.array(texts, dtype=object),
            "finish_reason": np.array(["stop" if row[2] else "length" for row in rows], dtype=object),
            "prompt_tokens": np.array([row[0] for row in rows], dtype=np.int64),
            "completion_tokens": np.array([row[1] for row in rows], dtype=np.int64),
        }
        if self._schema is not None:
            columns[PARSED.name], columns[REJECTED] = _parse_all(self._schema, texts)
        return columns


def _parse_all(schema: JsonSchema, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each text's JSON value, and per row None or the :class:`OutputError` that rejects it.

    Object arrays are filled one slot at a time: ``np.array`` of lists would make a 2-D array.
    """
    parsed = np.empty(len(texts), dtype=object)
    rejected = np.empty(len(texts), dtype=object)
    for row, text in enumerate(texts):
        try:
            parsed[row] = schema.parse(text)
        except OutputError as exc:
            rejected[row] = exc
    return parsed, rejected
