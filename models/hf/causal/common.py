"""What a causal LM spec gives :class:`~.model.HFGenerator`, and the rules every such spec shares.

A causal LM comes as a Hugging Face directory (:mod:`models.hf.causal.model`) or a
GGUF file (:mod:`models.gguf.spec`). Both load through transformers'
``from_pretrained``, with other arguments, into the one generator, or, with
an engine kind (``vllm``), into its own (:mod:`models.vllm`); both refuse chat
``on`` without a chat template, a ``max_new_tokens`` that leaves no room for a
prompt, and engine ``vllm`` without vLLM or with an option it lacks, in the
same words, and make their version the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol

from shardwise.errors import ConfigError
from shardwise.model import ModelInfo, OutputColumn
from shardwise.model.generation import GenerationSettings
from shardwise.model.kinds import engine_of
from shardwise.models.hf.causal.grammar import require_xgrammar

__all__ = [
    "OUTPUTS",
    "PARSED",
    "CausalSource",
    "causal_outputs",
    "causal_version",
    "chat_on",
    "check_room",
]

OUTPUTS = (
    OutputColumn("generated_text", "text"),
    OutputColumn("finish_reason", "text"),
    OutputColumn("prompt_tokens", "int", count=True),
    OutputColumn("completion_tokens", "int", count=True),
)
PARSED = OutputColumn("parsed", "json")
"""With a JSON Schema, the completion's JSON value."""


def causal_outputs(settings: GenerationSettings) -> tuple[OutputColumn, ...]:
    """A generator's result columns, with those its engine adds (vLLM's ``cached_tokens``), and ``parsed``
    too when its settings give a JSON Schema."""
    found = engine_of(settings.engine)
    engine = found.outputs() if found is not None else ()
    return (*OUTPUTS, *engine) if settings.json_schema is None else (*OUTPUTS, *engine, PARSED)


def chat_on(settings: GenerationSettings, has_template: bool, where: str) -> bool:
    """Whether prompts go through the chat template; refuses ``on`` when ``where``'s tokenizer has none."""
    if settings.chat == "on" and not has_template:
        raise ConfigError(
            f"chat is on, and the tokenizer in {where!r} has no chat template; use chat off "
            "(plain prompts) or auto"
        )
    return has_template and settings.chat != "off"


def check_room(name: str, settings: GenerationSettings, context: int) -> int:
    """``context``, once ``max_new_tokens`` is known to leave room in it for a prompt, the
    ``structured`` extra to be there when decoding is held to a JSON Schema, and vLLM (with valid
    options) when the engine is ``vllm`` (the engine kind checks its own)."""
    engine = engine_of(settings.engine)
    if engine is not None:
        engine.check(name, settings)
    if settings.json_schema is not None and settings.constrained:
        require_xgrammar(name)
    if settings.max_new_tokens >= context:
        raise ConfigError(
            f"max_new_tokens {settings.max_new_tokens} leaves no room for a prompt in the "
            f"model's context of {context} tokens; give fewer than {context}"
        )
    return context


def causal_version(tag: str, files: str, chat: bool, settings: GenerationSettings) -> str:
    """A generator's version: its kind, its files' hash, whether it chats, and its settings (with the
    engine's options that change outputs, as its engine kind says)."""
    text = f"{tag}\0{files}\0{'chat' if chat else 'plain'}\0{settings.token()}"
    found = engine_of(settings.engine)
    engine = found.version_token(settings) if found is not None else ""
    if engine:  # only another engine's versions get it: hf versions stay as they were
        text += f"\0{engine}"
    return hashlib.sha256(text.encode()).hexdigest()


class CausalSource(Protocol):
    """What :class:`HFGenerator` loads: a causal LM's identity, settings and ``from_pretrained`` arguments."""

    @property
    def name(self) -> str: ...

    @property
    def generation(self) -> GenerationSettings: ...

    def describe(self) -> ModelInfo: ...

    def chat(self) -> bool:
        """Whether prompts go through the tokenizer's chat template."""
        ...

    def pretrained(self) -> tuple[Path, dict[str, Any]]:
        """The folder and keyword arguments that transformers' ``from_pretrained`` loads both from."""
        ...
