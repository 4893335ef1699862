"""Constrained decoding: hold a generator's tokens to a JSON Schema, with xgrammar (the ``structured`` extra).

The schema is compiled once per loaded model into a grammar over the
tokenizer's vocabulary. Each batch gets one grammar matcher **per row**, not
one per batch: a row's allowed tokens then depend on its own tokens only, so
its output is the same whatever rows share its batch, and rows may leave or
join a batch. Before each step the matcher of every live row masks the
logits to the tokens its grammar allows; after the step it accepts the token
picked. Once the JSON value is complete the only token allowed is an
end-of-sequence token, so the row stops there (``finish_reason`` ``stop``).

Whitespace between JSON tokens is not allowed (``any_whitespace=False``):
xgrammar's default lets a model fill ``max_new_tokens`` with spaces and
newlines. The decoded text is still validated afterwards
(:mod:`shardwise.model.structured`): a grammar cannot rule out everything strict
JSON and ``jsonb`` refuse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from shardwise.errors import ConfigError

__all__ = ["JsonGuide", "require_xgrammar"]

_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")


def require_xgrammar(model: str) -> Any:
    """The xgrammar module, or a :class:`ConfigError` naming the extra that installs it."""
    try:
        import xgrammar
    except ImportError as exc:
        raise ConfigError(
            f"model {model!r}: json_schema with constrained decoding needs the structured extra: "
            "pip install 'shardwise[structured]' (xgrammar), or turn constrained decoding off "
            "(--unconstrained) to only validate the outputs"
        ) from exc
    return xgrammar


class JsonGuide:
    """A JSON Schema compiled against one tokenizer: gives a :class:`RowMatchers` per batch."""

    def __init__(self, model: str, tokenizer: Any, vocab_size: int, eos: Sequence[int], schema: str) -> None:
        self._xgr = xgr = require_xgrammar(model)
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=list(eos))
        try:
            self._grammar = xgr.GrammarCompiler(info).compile_json_schema(schema, any_whitespace=False)
        except RuntimeError as exc:  # xgrammar's C++ refusal: its first line says what it could not compile
            raise ConfigError(
                f"model {model!r}: json_schema cannot be compiled into a grammar for constrained decoding "
                f"({_reason(exc)}); fix the schema, or only validate the outputs (--unconstrained)"
            ) from exc
        self.vocab_size = vocab_size

    def start(self, rows: int) -> RowMatchers:
        """Fresh matchers for a batch of ``rows`` rows, each at the start of its JSON value."""
        return RowMatchers(self._xgr, [self._xgr.GrammarMatcher(self._grammar) for _ in range(rows)], self)


def _reason(exc: RuntimeError) -> str:
    """xgrammar's message without its ``[time] file.cc:line:`` prefix, on one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return _SOURCE_PREFIX.sub("", lines[0]) if lines else type(exc).__name__


class RowMatchers:
    """One grammar matcher per row of a batch: the loop calls :meth:`restrict`, then :meth:`accept`."""

    def __init__(self, xgr: Any, matchers: list[Any], guide: JsonGuide) -> None:
        self._xgr, self._matchers = xgr, matchers
        self._mask = xgr.allocate_token_bitmask(len(matchers), guide.vocab_size)

    def restrict(self, logits: torch.Tensor, live: Sequence[int], rows: Sequence[int]) -> None:
        """Set to -inf, in place, the logits of tokens the grammar does not allow next.

        ``live`` are the logits' rows to restrict, ``rows`` their places in the batch as collated
        (whose matchers they use): rows that stopped have left the logits.
        """
        if not live:
            return
        for at, row in zip(live, rows, strict=True):
            self._matchers[row].fill_next_token_bitmask(self._mask, at)
        mask = self._mask.to(logits.device, non_blocking=True)
        self._xgr.apply_token_bitmask_inplace(logits, mask, vocab_size=logits.shape[-1], indices=list(live))

    def accept(self, tokens: Sequence[int], live: Sequence[int], rows: Sequence[int]) -> None:
        """Advance the matcher of each of ``rows`` by the token of its logits' row in ``live``."""
        for at, row in zip(live, rows, strict=True):
            self._matchers[row].accept_token(int(tokens[at]))
