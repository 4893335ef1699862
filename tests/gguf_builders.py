"""A tiny GGUF causal LM, written here from the tiny random Llama of ``hf_builders``: nothing downloaded.

:func:`write_gguf` converts a ``tiny_causal_lm`` directory as llama.cpp's
``convert_hf_to_gguf.py`` would, with the ``gguf`` package's writer: llama
hyper-parameters, the byte-level BPE as ``tokenizer.ggml.model`` ``gpt2``
(tokens, merges, token types, special ids, optional chat template) and float32
tensors under llama.cpp's names, the q and k projections permuted as llama.cpp
permutes them (transformers' GGUF loader undoes that). The file is a few
hundred kB, so the same weights load from either form and must generate alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

_LAYER_TENSORS = {
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k permutation: each head's rotary halves interleaved."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def write_gguf(
    directory: Path, target: Path, *, chat_template: str | None = None, name: str = "tiny"
) -> Path:
    """Write the ``tiny_causal_lm`` in ``directory`` to the GGUF file ``target``; return ``target``.

    ``name`` goes into ``general.name``: another name gives other bytes (another version) for the
    same weights.
    """
    import gguf
    from transformers import AutoModelForCausalLM

    net: Any = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
    config = net.config
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(target), "llama")
    writer.add_name(name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    rope = getattr(config, "rope_parameters", None) or {}  # transformers 5; rope_theta before
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))))
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, directory, chat_template)
    _add_tensors(writer, net)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def _add_tokenizer(writer: Any, directory: Path, chat_template: str | None) -> None:
    import gguf

    saved = json.loads((directory / "tokenizer.json").read_text())
    tokens = {index: token for token, index in saved["model"]["vocab"].items()}
    special = {added["id"] for added in saved["added_tokens"] if added["special"]}
    tokens.update({added["id"]: added["content"] for added in saved["added_tokens"]})
    merges = [m if isinstance(m, str) else " ".join(m) for m in saved["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([tokens[i] for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))]
    )
    writer.add_bos_token_id(0)  # <s>, as tiny_causal_lm's tokenizer has it
    writer.add_eos_token_id(1)  # </s>, also its padding
    writer.add_pad_token_id(1)
    writer.add_add_bos_token(True)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def _add_tensors(writer: Any, net: Any) -> None:
    config = net.config
    state = {key: value.float().numpy() for key, value in net.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    writer.add_tensor("output.weight", state["lm_head.weight"])
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    for n in range(config.num_hidden_layers):
        layer = f"model.layers.{n}."
        writer.add_tensor(f"blk.{n}.attn_q.weight", _permute(state[layer + "self_attn.q_proj.weight"], heads))
        writer.add_tensor(
            f"blk.{n}.attn_k.weight", _permute(state[layer + "self_attn.k_proj.weight"], kv_heads)
        )
        for ours, theirs in _LAYER_TENSORS.items():
            writer.add_tensor(f"blk.{n}.{ours}.weight", state[f"{layer}{theirs}.weight"])
