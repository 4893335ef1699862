"""The decoding loop of a causal LM over one batch: continuous batching over the KV cache, greedy or sampled.

The batch carries its prompts' passes as planned by the generator's collate
(:attr:`models.hf.causal.prompt.PromptBatch.groups`: rows of similar prompt length).
Rows are admitted in that order, as many as fit a KV-cache budget: the
prompts of each planned pass among them run in a forward pass of their own,
left-padded only to the longest of that pass, and the caches are stacked
once (:func:`models.hf.causal.kv.stack`); then one pass per new token. One pass
over all the prompts would pad each to the longest of the whole batch: on
short texts of uneven length about half of it was padding.

A row finishes at its first end-of-sequence token or at ``max_new_tokens``,
and **leaves the batch** at once: it is dropped from the cache
(``batch_select_indices``), and positions no remaining row attends to are
cut. The room it frees goes to the **waiting rows**, which **join**
mid-decode: their prompts are prefilled in passes of their own and their
cache is stacked onto the running one, the shorter left-padded
(:mod:`models.hf.causal.kv`). Positions are passed explicitly and padding is
masked, so every row computes what it would alone, whatever rows it shares
passes with: batched greedy output equals unbatched ``generate``.

Why this kind: the cache is transformers' ``DynamicCache`` (contiguous, one
tensor per layer), not a paged one. Paging needs attention kernels that read
scattered blocks, which plain transformers models on CPU do not have; a
contiguous cache costs a copy when rows leave or join, small beside the
passes over the whole model between them. A model whose cache layers are not
plain ``DynamicLayer`` s (sliding windows, quantised caches) runs each
admission's prompts in one pass, lets rows leave, and starts waiting rows
only once the batch is empty.

With a guide (:mod:`models.hf.causal.grammar`) each live row's logits are masked
to what its grammar allows before the pick, and its matcher then accepts the
token picked: a host round trip per step, which constrained decoding needs.

Sampling draws each row from its own :class:`torch.Generator`, seeded per
row (:attr:`models.hf.causal.prompt.Prompt.seed`), one draw per step, so a row's
text does not depend on which rows share its batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from shardwise.model.generation import GenerationSettings
from shardwise.models.hf.causal.kv import joinable, keep_rows, stack, stackable, trim

__all__ = ["decode"]

Picker = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""Picks a token per row from ``(logits, rows)``: the logits of the rows still in the batch, and
their places in the batch as collated (which keep their own random generators)."""


def decode(
    net: Any,
    batch: Any,
    settings: GenerationSettings,
    eos: torch.Tensor,
    pad_id: int,
    guide: Any = None,
    kv_budget: int | None = None,
) -> torch.Tensor:
    """Generate for ``batch`` (a :class:`models.hf.causal.prompt.PromptBatch` on the net's device).

    Gives int64 rows ``[prompt tokens, completion tokens, stopped (1) or cut
    at the length (0), token ids...]``, the ids padded to ``max_new_tokens``;
    completion tokens count the text's tokens, the end-of-sequence token not included.
    ``guide`` (a :class:`models.hf.causal.grammar.JsonGuide`) constrains the tokens. At most
    ``kv_budget`` tokens of KV cache (prompt plus ``max_new_tokens`` a row) decode at once; the
    other rows wait and join as rows finish (all at once when None).
    """
    rows, steps = batch.input_ids.shape[0], settings.max_new_tokens
    pick = _picker(settings, batch.seeds)
    matchers = None if guide is None else guide.start(rows)
    prompt = batch.attention_mask.sum(dim=1)
    tokens = batch.input_ids.new_full((rows, steps), pad_id)
    length = batch.input_ids.new_zeros(rows)
    written = batch.input_ids.new_zeros(rows)
    stopped = torch.zeros(rows, dtype=torch.bool, device=prompt.device)
    order = [row for group in batch.groups for row in group]
    waiting = _Waiting(order, [n + steps for n in prompt.tolist()], kv_budget)
    groups = batch.groups if stackable(net) else (tuple(order),)
    live: _Live | None = None
    while True:
        joining = waiting.admit(can_join=live is None or joinable(live.cache))
        if joining:
            live = _join(net, batch, _passes(groups, joining), live)
        if live is None:
            break
        active = live.rows
        chosen = _step(live.logits, active, pick, matchers)
        tokens[active, written[active]] = chosen
        hit = torch.isin(chosen, eos)
        length[active] += (~hit).long()
        written[active] += 1
        stopped[active] |= hit
        done = hit | (written[active] >= steps)
        # The one host synchronisation per step: rows that finished leave, and free room for waiting rows.
        finished = done.nonzero().flatten()
        if len(finished):
            waiting.release(active[finished].tolist())
            live = live.without(finished, len(active))
        if live is not None:
            live = live.advance(net, chosen[~done] if len(finished) else chosen)
    return torch.cat([prompt[:, None], length[:, None], stopped[:, None].long(), tokens], dim=1)


class _Waiting:
    """The rows of a batch not yet decoding, in ``order`` (the prompts' passes, one after another),
    admitted while their KV cost fits."""

    def __init__(self, order: list[int], costs: list[int], budget: int | None) -> None:
        self._order, self._costs, self._budget = order, costs, budget
        self._next, self._used = 0, 0

    def admit(self, *, can_join: bool) -> list[int]:
        """The rows to start now: the next ones that fit the budget (at least one when none decodes)."""
        if not can_join and self._used:
            return []
        start = self._next
        while self._next < len(self._order):
            cost = self._costs[self._order[self._next]]
            if self._budget is not None and self._used + cost > self._budget and self._used:
                break
            self._used += cost
            self._next += 1
        return self._order[start : self._next]

    def release(self, rows: list[int]) -> None:
        self._used -= sum(self._costs[row] for row in rows)


@dataclass
class _Live:
    """The rows decoding now: their places in the batch, KV cache, mask, positions and next logits."""

    rows: torch.Tensor
    cache: Any
    mask: torch.Tensor
    positions: torch.Tensor
    logits: torch.Tensor

    def without(self, finished: torch.Tensor, count: int) -> _Live | None:
        """The same rows less ``finished`` (indices among ``count``); None when none is left."""
        keep = torch.ones(count, dtype=torch.bool, device=finished.device)
        keep[finished] = False
        kept = keep.nonzero().flatten()
        if not len(kept):
            return None
        keep_rows(self.cache, kept)
        mask = self.mask[kept]
        if joinable(self.cache):
            mask = trim(self.cache, mask)
        return _Live(self.rows[kept], self.cache, mask, self.positions[kept], self.logits[kept])

    def advance(self, net: Any, chosen: torch.Tensor) -> _Live:
        """One pass over the chosen tokens: the cache grows a position, the next logits come."""
        mask = torch.cat([self.mask, self.mask.new_ones(len(self.rows), 1)], dim=1)
        positions = self.positions[:, -1:] + 1
        out = net(
            input_ids=chosen[:, None],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{_cache_argument(net): self.cache},
        )
        return _Live(self.rows, _cache_of(out), mask, positions, out.logits[:, -1, :].float())


def _passes(groups: tuple[tuple[int, ...], ...], joining: list[int]) -> list[list[int]]:
    """The rows of ``joining`` cut into the planned prompts' passes (a pass's rows that joined)."""
    now = set(joining)
    return [part for group in groups if (part := [row for row in group if row in now])]


def _join(net: Any, batch: Any, passes: list[list[int]], live: _Live | None) -> _Live:
    """Run the prompts of each pass of rows of ``batch``, and stack them all onto ``live`` at once."""
    parts = [_prefill(net, batch, rows) for rows in passes]
    if live is not None:
        parts.insert(0, live)
    if len(parts) == 1:
        return parts[0]
    mask = stack([part.cache for part in parts], [part.mask for part in parts])
    return _Live(
        torch.cat([part.rows for part in parts]),
        parts[0].cache,
        mask,
        torch.cat([part.positions[:, -1:] for part in parts]),
        torch.cat([part.logits for part in parts]),
    )


def _prefill(net: Any, batch: Any, joining: list[int]) -> _Live:
    """One pass over the prompts of ``joining`` (rows of ``batch``), padded to the longest of them."""
    picked = torch.tensor(joining, device=batch.input_ids.device)
    mask = batch.attention_mask[picked]
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if len(used) else 0  # the batch's padding none of these rows needs
    ids, mask = batch.input_ids[picked, start:], mask[:, start:]
    # Positions count real tokens only, so a left-padded prompt sees the same
    # positions as it would alone; padding is masked out whatever it gets.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = net(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **_last_logits(net))
    return _Live(picked, _cache_of(out), mask, positions[:, -1:], out.logits[:, -1, :].float())


def _step(logits: torch.Tensor, active: torch.Tensor, pick: Picker, matchers: Any) -> torch.Tensor:
    """The token each decoding row takes next: picked from its logits, which the rows' grammar
    matchers (if any) first mask, and which they then accept."""
    if matchers is None:
        return pick(logits, active)
    rows = active.tolist()
    going = list(range(len(rows)))
    matchers.restrict(logits, going, rows)
    chosen = pick(logits, active)
    matchers.accept(chosen.tolist(), going, rows)
    return chosen


def _cache_argument(net: Any) -> str:
    """The forward pass's KV-cache keyword: ``cache`` since transformers 5.2x, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(net.forward).parameters else "past_key_values"


def _last_logits(net: Any) -> dict[str, int]:
    """Ask the prompts' pass for the last position's logits only, where the model can: the others
    would be a (rows x prompt x vocabulary) matmul that nothing reads."""
    parameters = inspect.signature(net.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):  # transformers' name since 4.50, and before
        if name in parameters:
            return {name: 1}
    return {}


def _cache_of(out: Any) -> Any:
    """The KV cache a forward pass returned, under either of transformers' names for it."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _picker(settings: GenerationSettings, seeds: torch.Tensor) -> Picker:
    """How each step picks a token per row from its logits: argmax, or a seeded draw per row."""
    if settings.greedy:
        return lambda logits, rows: logits.argmax(dim=-1)
    device = seeds.device
    generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds.tolist()]
    temperature, top_p = settings.temperature, settings.top_p

    def pick(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        probs = _nucleus(torch.softmax(logits / temperature, dim=-1), top_p)
        mine = [generators[row] for row in rows.tolist()]
        draws = [torch.multinomial(p, 1, generator=g) for p, g in zip(probs, mine, strict=True)]
        return torch.cat(draws)

    return pick


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` with all but the smallest set of most likely tokens reaching ``top_p`` zeroed."""
    if top_p >= 1.0:
        return probs
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # mass of the more likely tokens; the top one always stays
    ordered = ordered.masked_fill(before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, ordered)
