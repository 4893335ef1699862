"""Causal language models that generate text: the spec (:mod:`.model`), its prompts, chat template
check, decoding loop, KV cache, CPU attention and grammar-held decoding."""

__all__: list[str] = []
