"""A causal LM generating through vLLM: a :class:`~shardwise.model.SelfBatching` model, a window at a time.

The rows' prompts are made exactly as the ``hf`` engine makes them
(:class:`~models.hf.causal.prompt.PromptRenderer`: template, system text, chat template, the same
token ids, the same refusal of a prompt that leaves no room for ``max_new_tokens``) and handed to vLLM
as token ids, sorted by their rendered text so that rows sharing a system text and template prefix run
together and vLLM's prefix cache serves their common part.
Outcomes come back in input order.

Sampling follows the settings: greedy at temperature 0, else ``temperature`` and ``top_p`` with each
row's own seed (:func:`~models.hf.causal.prompt.row_seed`, from the run's seed and the row's prompt, as the
``hf`` engine seeds it; the draws themselves are vLLM's, so sampled text differs between engines). A
row stops at the model's end-of-sequence ids (its ``generation_config.json``, else its config's, else
the tokenizer's, as the ``hf`` engine reads them) or at ``max_new_tokens``. With a JSON Schema and
``constrained`` decoding, vLLM's structured outputs hold decoding to the schema; every completion is
checked against the schema whatever the decoding, and one that fails is that row's dead letter.

The outputs are the ``hf`` engine's: ``generated_text`` (the completion decoded whole, special tokens
and NUL characters removed), ``finish_reason`` (``stop`` or ``length``), ``prompt_tokens`` and
``completion_tokens`` (the end-of-sequence token not counted), and ``parsed`` with a schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from shardwise.errors import InputError, OutputError
from shardwise.models.hf.causal.prompt import PromptRenderer, load_tokenizer, row_seed
from shardwise.models.vllm.engines import EngineKey, Request, engine_for, model_paths
from shardwise.models.vllm.options import VllmOptions, require_vllm

if TYPE_CHECKING:
    from shardwise.model import OutputColumn
    from shardwise.models.hf.causal.common import CausalSource

__all__ = ["VllmGenerator", "vllm_prompts"]


def vllm_prompts(spec: CausalSource, context: int) -> PromptRenderer:
    """How a :class:`VllmGenerator` of ``spec`` (a model of ``context`` tokens) renders and tokenizes its
    rows' prompts, the context cut to ``max_model_len``: it sends these token ids, and a plan counts them
    without building an engine."""
    limit = VllmOptions.of(spec.generation).max_model_len
    max_length = context if limit is None else min(context, limit)
    folder, pretrained = spec.pretrained()
    tokenizer = load_tokenizer(folder, pretrained)
    return PromptRenderer(spec.name, spec.generation, spec.chat(), tokenizer, max_length)


class VllmGenerator:
    """A causal LM loaded into this worker's vLLM engine (see the module docstring).

    Loading builds the engine (or finds the one this process built for the same model and options),
    so a worker that cannot start vLLM fails when it loads the model, as one that cannot load weights.
    """

    def __init__(self, spec: CausalSource, device: torch.device) -> None:
        require_vllm(spec.name)
        info = spec.describe()
        self.name, self.version, self.device = spec.name, info.version, device
        self.outputs: tuple[OutputColumn, ...] = info.outputs
        self.settings = spec.generation
        self.options = VllmOptions.of(self.settings)
        folder, pretrained = spec.pretrained()
        self.prompts = vllm_prompts(spec, info.max_length)
        self.max_length = self.prompts.max_length
        self._tokenizer: Any = self.prompts.tokenizer
        self._eos = _eos_ids(folder, pretrained, self._tokenizer)
        self._schema = self.settings.output_schema()
        model, tokenizer = model_paths(folder, pretrained)
        self._key = EngineKey(model, tokenizer, self.options.engine_key(), str(device))
        engine_for(self._key, self.options)

    @property
    def engine_key(self) -> EngineKey:
        """Which of this process's engines it generates with."""
        return self._key

    def score_window(self, values: Sequence[object]) -> list[Mapping[str, Any] | InputError]:
        """One outcome per value, in input order: the row's outputs, or the dead letter's reason.

        Raises :class:`~shardwise.errors.TransientError` when the engine dies or hangs (it is rebuilt
        for the next window)."""
        outcomes: list[Mapping[str, Any] | InputError | None] = [None] * len(values)
        prompts: dict[int, tuple[str, list[int]]] = {}
        for row, value in enumerate(values):
            try:
                text = self.prompts.render(value)
                prompts[row] = (text, self.prompts.ids(text))
            except InputError as exc:
                outcomes[row] = exc
        order = sorted(prompts, key=lambda row: prompts[row][0])  # shared prefixes run together
        requests = [
            Request(str(row), prompts[row][1], self.sampling_params(prompts[row][1])) for row in order
        ]
        engine = engine_for(self._key, self.options) if requests else None
        finished = {} if engine is None else engine.generate(requests, self.options.stall_timeout_s)
        for row in order:
            outcomes[row] = self._outcome(finished[str(row)], len(prompts[row][1]))
        assert all(outcome is not None for outcome in outcomes)  # every row was refused or generated
        return outcomes  # type: ignore[return-value]

    def sampling_params(self, ids: Sequence[int]) -> Any:
        """A row's ``vllm.SamplingParams``: Shardwise's settings, this model's stop ids, no detokenizing
        (the text is decoded here, whole, as the ``hf`` engine decodes it)."""
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        settings = self.settings
        structured = None
        if self._schema is not None and settings.constrained:
            structured = StructuredOutputsParams(json=self._schema.text)
        sampling: dict[str, Any] = {"temperature": 0.0}
        if not settings.greedy:
            sampling = {
                "temperature": settings.temperature,
                "top_p": settings.top_p,
                "seed": row_seed(settings.seed, ids),
            }
        return SamplingParams(
            max_tokens=settings.max_new_tokens,
            stop_token_ids=list(self._eos),
            ignore_eos=True,  # the stop ids above are the model's end-of-sequence ids, as hf reads them
            detokenize=False,
            structured_outputs=structured,
            **sampling,
        )

    def completion(self, output: Any) -> tuple[str, int, str]:
        """A finished ``RequestOutput``'s text (decoded whole, special tokens and NULs removed), its
        completion tokens (the end-of-sequence token not counted) and its finish reason."""
        completion = output.outputs[0]
        ids, reason = list(completion.token_ids), str(completion.finish_reason)
        if reason == "stop" and ids and ids[-1] in self._eos:
            ids = ids[:-1]
        return self._tokenizer.decode(ids, skip_special_tokens=True).replace("\x00", ""), len(ids), reason

    def _outcome(self, output: Any, prompt_tokens: int) -> Mapping[str, Any] | InputError:
        text, tokens, reason = self.completion(output)
        if reason not in ("stop", "length"):
            return InputError(f"vLLM ended the row's generation with finish reason {reason!r}")
        values: dict[str, Any] = {
            "generated_text": text,
            "finish_reason": reason,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": tokens,
            "cached_tokens": int(output.num_cached_tokens or 0),  # served by the prefix cache
        }
        if self._schema is not None:
            try:
                values["parsed"] = self._schema.parse(text)
            except OutputError as exc:
                return exc
        return values


def _eos_ids(folder: Path, pretrained: Mapping[str, Any], tokenizer: Any) -> frozenset[int]:
    """The model's end-of-sequence ids, read as transformers' model reads them for the ``hf`` engine:
    ``generation_config.json``, else the model's config, else the tokenizer's EOS."""
    from transformers import AutoConfig, GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(folder, **pretrained).eos_token_id
    except (OSError, ValueError):
        eos = getattr(AutoConfig.from_pretrained(folder, **pretrained), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return frozenset(() if eos is None else (eos,) if isinstance(eos, int) else eos)
