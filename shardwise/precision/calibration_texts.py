"""The built-in calibration texts: what the precision guard and int8's smoothing measure a model on.

They are Shardwise's own, never a user's rows, so that checking a precision
needs no data and gives the same figure on every host for the same weights.
"""

from __future__ import annotations

from shardwise.errors import ConfigError, InputError
from shardwise.model import Item, Model
from shardwise.model.text import Inputs

__all__ = ["CALIBRATION_TEXTS", "calibration_items"]

# Our own short texts of varied length and vocabulary, long enough together to
# exercise attention at several widths. Calibration must not need the user's data.
CALIBRATION_TEXTS: tuple[str, ...] = (
    "ok",
    "Shard 12 finished in 4.2 seconds.",
    "The nightly run scores every new row and writes one result per key.",
    "Error 503: the upstream service is unavailable; retry after 30 seconds.",
    "def merge(rows): return sorted(rows, key=len)  # shortest first",
    "A worker that dies mid-shard loses nothing: the shard is retried and merged once.",
    "Prices rose 3.1% in March, led by energy (+7.4%) and food (+2.2%), the report said.",
    "SELECT id, body FROM articles WHERE updated_at > now() - interval '1 day' ORDER BY id;",
    " ".join(["tokens in a long row padded to its batch's longest row"] * 12),
    "Les résultats sont écrits une seule fois, avec leur provenance, dans la table de sortie.",
    "数据按长度排序后分批处理, 每批只填充到最长的一行。",
    " ".join(f"item {i}: value {i * i % 97}" for i in range(60)),
)


def calibration_items(model: Model, pairs: bool) -> list[Item]:
    """The calibration texts (or pairs) the model can prepare; a ConfigError when it prepares none."""
    values: list[object] = list(CALIBRATION_TEXTS)
    if pairs:
        shifted = CALIBRATION_TEXTS[1:] + CALIBRATION_TEXTS[:1]
        values = [Inputs.pair(a, b) for a, b in zip(CALIBRATION_TEXTS, shifted, strict=True)]
    items = []
    for value in values:
        try:
            items.append(model.prepare(value))
        except InputError:
            continue
    if not items:
        raise ConfigError(f"model {model.name!r} prepares none of the calibration texts")
    return items
