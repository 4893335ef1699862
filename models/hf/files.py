"""Reading a local Hugging Face model directory: layout, JSON files, max length and tokenizer.

Shared by the encoder (:mod:`models.hf.encoders.encoder`) and the classifier
(:mod:`models.hf.encoders.classifier`). Nothing here loads weights or touches the network.

Segment ids: an encoding carries ``type_ids`` only when its input was a
``(text, text_pair)`` pair *and* the model has more than one segment embedding
(``type_vocab_size > 1``, as BERT does). A single text's segment ids are all
zero, which is what the model assumes when it gets none, so sending them would
only cost a tensor per batch; a model with one segment embedding (RoBERTa)
or none (DistilBERT) never gets them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shardwise.bounded_read import read_regular_file
from shardwise.errors import ConfigError
from shardwise.model import Encoding, TextInput

__all__ = [
    "MAX_JSON_BYTES",
    "VERSIONED",
    "WEIGHTS",
    "check_layout",
    "encode",
    "load_tokenizer",
    "max_length_of",
    "missing_files",
    "pad_id",
    "read_json",
    "uses_segments",
]

WEIGHTS = ("model.safetensors", "pytorch_model.bin")
MAX_JSON_BYTES = 64 << 20
"""The most one of a model directory's JSON files may hold (64 MiB): a tokenizer's added tokens and
chat templates take a few megabytes at most; weights are not JSON."""
VERSIONED = (
    "config.json",
    *WEIGHTS,
    "tokenizer.json",
    "tokenizer_config.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)
"""The files whose bytes make a model's version (missing ones are skipped)."""


def missing_files(root: Path, needed: tuple[str, ...]) -> list[str]:
    """Which of ``needed`` (and of the weights files, one of which is enough) ``root`` lacks.

    Each name is looked up on its own; the directory is never listed, so a
    message built from this names only files a model directory should hold,
    never what else a mistyped path (``--model /etc``) happens to contain.
    """
    missing = [name for name in needed if not (root / name).is_file()]
    if not any((root / w).is_file() for w in WEIGHTS):
        missing.append(" or ".join(WEIGHTS))
    return missing


def check_layout(root: Path) -> None:
    """Raise a :class:`ConfigError` naming what is missing unless ``root`` has config, weights, tokenizer.

    The message names the missing files and the fix, never the directory's other contents
    (see :func:`missing_files`).
    """
    if not root.is_dir():
        raise ConfigError(
            f"model path {str(root)!r} is not a directory; give a local Hugging Face model directory"
        )
    missing = missing_files(root, ("config.json", "tokenizer.json"))
    if missing:
        raise ConfigError(
            f"model directory {str(root)!r} is not a Hugging Face model directory: it lacks "
            f"{', '.join(missing)}; give a directory saved with save_pretrained() and a fast tokenizer, "
            "a GGUF file, or a catalogue name"
        )


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or ``{}`` when the file does not exist.

    Read as any file a user named is (:mod:`shardwise.bounded_read`): a regular file only, at most
    :data:`MAX_JSON_BYTES`, so a FIFO or a device in a model directory cannot hang the run.
    """
    if not path.is_file():
        return {}
    try:
        data = json.loads(read_regular_file(path, what="the model file", max_bytes=MAX_JSON_BYTES))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{str(path)!r} is not valid JSON ({exc}); re-save the model directory") from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"{str(path)!r} holds a JSON {type(data).__name__}, expected an object; "
            "re-save the model directory"
        )
    return data


def max_length_of(root: Path, config: Mapping[str, Any]) -> int:
    """Longest input in tokens: sentence-transformers' ``max_seq_length``, else the tokenizer's
    ``model_max_length`` (else 512), never more than the model's position embeddings."""
    st = read_json(root / "sentence_bert_config.json")
    tok_cfg = read_json(root / "tokenizer_config.json")
    limit = int(st.get("max_seq_length") or tok_cfg.get("model_max_length") or 512)
    return min(limit, int(config.get("max_position_embeddings") or limit))


def uses_segments(config: Mapping[str, Any]) -> bool:
    """Whether the model embeds segment ids (``token_type_ids``), so pairs must carry them."""
    return int(config.get("type_vocab_size") or 0) > 1


def load_tokenizer(root: Path, max_length: int) -> Any:
    """The directory's fast tokenizer: unpadded, cut to ``max_length`` (a pair's longest member first)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    # The saved file may carry its own truncation and padding (MiniLM's
    # says 128); the engine pads per batch and the model limit rules.
    tokenizer.enable_truncation(max_length, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer


def encode(tokenizer: Any, text: TextInput, segments: bool) -> Encoding:
    """Encode a text or a ``(text, text_pair)`` pair; a pair has ``type_ids`` when ``segments`` is true."""
    pair = not isinstance(text, str)
    e = tokenizer.encode(text[0], text[1]) if pair else tokenizer.encode(text)
    return Encoding(e.ids, bool(e.overflowing), e.type_ids if segments and pair else None)


def pad_id(tokenizer: Any, config: Mapping[str, Any]) -> int:
    """The padding id: the tokenizer's ``[PAD]`` or ``<pad>``, else config's ``pad_token_id``, else 0."""
    for token in ("[PAD]", "<pad>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return int(config.get("pad_token_id") or 0)
