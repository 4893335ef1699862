"""Local Hugging Face models: a model directory (or ``hf:/path``), and the built-in names ``tiny`` and
``minilm``, as the ``hf`` model kind.

The directory's ``config.json`` says which part loads it (:mod:`.directory`): an encoder, a sequence
classifier or cross-encoder (:mod:`.encoders`), a causal language model that generates text
(:mod:`.causal`), or an image model (:mod:`.images`). Files, heads and the loaded-model base they share
sit here beside them.
"""

__all__: list[str] = []
