"""The ``vllm`` model kind: vLLM as the engine of a causal LM directory or GGUF file (``--engine vllm``).

It claims no ``--model`` value of its own: the generation settings choose it for a model another kind
claims (``hf``, ``gguf``), whose spec asks it (:class:`~shardwise.model.kinds.Engine`) how to load, what
columns it adds and what goes into the version; its engine settings (``--engine-option``) travel with the
generation settings, and :class:`~.options.VllmOptions` checks them. Nothing here imports vLLM or torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardwise.errors import ConfigError
from shardwise.model import ModelSpec, OutputColumn
from shardwise.model.generation import GenerationSettings
from shardwise.model.kinds import KindDefaults
from shardwise.models.vllm.options import VllmOptions, require_vllm, version_token
from shardwise.pipeline.chunks import GENERATION_CHUNK_ROWS

if TYPE_CHECKING:
    import torch

__all__ = ["CACHED", "KIND", "VllmKind"]

CACHED = OutputColumn("cached_tokens", "int", count=True)
"""The row's prompt tokens vLLM's prefix cache served (a remote model reports the same from its usage);
summed, their share of the prompt tokens is the run's prefix cache hit rate."""


@dataclass(frozen=True)
class VllmKind(KindDefaults):
    """The vLLM engine: chosen by the engine setting, never by a model name."""

    name: str = "vllm"
    reads_gguf: bool = False  # vLLM loads a directory: a GGUF file is converted into one first

    def claims(self, model: str) -> bool:
        return False

    def spec(self, model: str) -> ModelSpec:
        raise ConfigError(
            f"model {model!r}: vllm is an engine, not a model; give a causal LM directory or .gguf file as "
            "--model and --engine vllm"
        )

    def chunk_rows(self, spec: ModelSpec) -> int:
        return GENERATION_CHUNK_ROWS

    def check(self, model: str, settings: GenerationSettings) -> None:
        VllmOptions.of(settings)
        require_vllm(model)

    def require(self, model: str) -> None:
        require_vllm(model)

    def outputs(self) -> tuple[OutputColumn, ...]:
        return (CACHED,)

    def version_token(self, settings: GenerationSettings) -> str:
        return version_token(settings)

    def load(self, spec: Any, device: torch.device) -> Any:
        from shardwise.models.vllm.generator import VllmGenerator

        return VllmGenerator(spec, device)

    def prompt_counter(self, spec: Any) -> Any:
        from shardwise.models.vllm.generator import vllm_prompts

        return vllm_prompts(spec, spec.context())


KIND = VllmKind()
