"""The decoding loop of a causal LM over one left-padded batch, with the KV cache, greedy or sampled.

Every row is decoded at once from its prompt: one forward pass over the
prompts fills the cache, then one pass per new token. A row stops at its
first end-of-sequence token; the batch stops when every row has stopped or
``max_new_tokens`` are made. Stopped rows **leave the batch**: once a quarter
of the rows still in it have stopped, they are dropped from the KV cache and
the inputs (the cache's ``batch_select_indices``), so the passes that follow
compute only the rows still writing; until then a stopped row is fed
padding, which its attention never mixes into another row. No waiting row
takes a freed place: continuous batching (rows joining mid-decode) is not
done, because a joining row needs its prompt's KV spliced into a left-padded
cache of another length, and the engine hands the model one budgeted batch
at a time; sorting by prompt length keeps the padding low instead.

With a guide (:mod:`models.hf_grammar`) each live row's logits are masked
to what its grammar allows before the pick, and its matcher then accepts the
token picked: a host round trip per step, which constrained decoding needs.

Sampling draws each row from its own :class:`torch.Generator`, seeded per
row (:attr:`models.hf_causal.Prompt.seed`), one draw per step, so a row's
text does not depend on which rows share its batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from shardwise.generation import GenerationSettings

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
) -> torch.Tensor:
    """Generate for ``batch`` (a :class:`models.hf_causal.PromptBatch` on the net's device).

    Gives int64 rows ``[prompt tokens, completion tokens, stopped (1) or cut
    at the length (0), token ids...]``, the ids padded to ``max_new_tokens``;
    completion tokens count the text's tokens, the end-of-sequence token not included.
    ``guide`` (a :class:`models.hf_grammar.JsonGuide`) constrains the tokens.
    """
    ids, mask = batch.input_ids, batch.attention_mask
    rows, steps = ids.shape[0], settings.max_new_tokens
    pick = _picker(settings, batch.seeds)
    # Positions count real tokens only, so a left-padded prompt sees the same
    # positions as it would alone; padding is masked out whatever it gets.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = net(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **_last_logits(net))
    tokens = ids.new_full((rows, steps), pad_id)
    length = ids.new_zeros(rows)
    stopped = torch.zeros(rows, dtype=torch.bool, device=ids.device)
    matchers = None if guide is None else guide.start(rows)
    active = torch.arange(rows, device=ids.device)  # the batch's rows still decoding, by their place in it
    for step in range(steps):
        live = ~stopped[active]
        chosen = _step(out.logits[:, -1, :].float(), live, active, pick, matchers)
        tokens[active, step] = torch.where(live, chosen, pad_id)
        hit = live & torch.isin(chosen, eos)
        length[active] += (live & ~hit).long()
        stopped[active] = ~live | hit
        going = live & ~hit
        # The one host synchronisation per step: it ends the batch once every row has stopped, and
        # lets stopped rows leave it.
        left = int(going.sum())
        if step + 1 == steps or left == 0:
            break
        cache = _cache_of(out)
        if left <= len(active) * 3 // 4 and hasattr(cache, "batch_select_indices"):
            keep = going.nonzero().flatten()
            cache.batch_select_indices(keep)
            active, mask, positions = active[keep], mask[keep], positions[keep]
        mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
        positions = positions[:, -1:] + 1
        out = net(
            input_ids=tokens[active, step : step + 1],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{_cache_argument(net): cache},
        )
    prompt = batch.attention_mask.sum(dim=1)
    return torch.cat([prompt[:, None], length[:, None], stopped[:, None].long(), tokens], dim=1)


def _step(
    logits: torch.Tensor, live: torch.Tensor, active: torch.Tensor, pick: Picker, matchers: Any
) -> torch.Tensor:
    """The token each row of the decoding batch takes next: picked from its logits, which the rows'
    grammar matchers (if any) first mask, and which they then accept."""
    if matchers is None:
        return pick(logits, active)
    rows = active.tolist()
    going = live.nonzero().flatten().tolist()
    matchers.restrict(logits, going, [rows[i] for i in going])
    chosen = pick(logits, active)
    matchers.accept(chosen.tolist(), going, [rows[i] for i in going])
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
