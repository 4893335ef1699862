"""A causal language model in one GGUF file (llama.cpp's format) as ``--model FILE.gguf``: the ``gguf``
model kind. Its header is read without loading weights (:mod:`.header`); the spec (:mod:`.spec`) loads
it through transformers, or hands a converted directory to vLLM."""

__all__: list[str] = []
