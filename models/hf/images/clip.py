"""A loaded CLIP or SigLIP model: pictures and texts scored into one embedding space.

A row's value is a picture (an :class:`~shardwise.model.binary_value.BinaryValue` or
bytes), which the vision tower embeds, or a text (``str``), which the text
tower embeds; both towers' outputs are L2-normalised, as CLIP does before
comparing them, so the inner product and the cosine distance (pgvector's
``<=>``) rank a text query's images alike. A batch may hold both kinds, since
a window is ordered by cost (a text's tokens, a picture's pixels) and one
batch may straddle the two: :class:`DualBatch` keeps each kind's rows.

SigLIP's text tower reads its last token and was trained on texts padded to
its full length without an attention mask, so SigLIP texts are padded so too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from shardwise.batch.collate import collate_encodings
from shardwise.errors import InputError
from shardwise.model import Encoding, ModelInputs
from shardwise.model.image_model import PixelItem, stack_pixels
from shardwise.model.text import coerce_text
from shardwise.models.hf.files import encode, load_tokenizer, pad_id, read_json
from shardwise.models.hf.images.loaded import ImageLoaded, load_checked

__all__ = ["DualBatch", "HFClip"]


@dataclass(frozen=True, slots=True)
class DualBatch:
    """A batch of pictures (``image_rows``) and texts (``text_rows``): positions in the batch's order."""

    pixel_values: torch.Tensor | None
    text: ModelInputs | None
    image_rows: tuple[int, ...]
    text_rows: tuple[int, ...]

    @property
    def padded_cost(self) -> int:
        pixels = 0 if self.pixel_values is None else self.pixel_values[:, 0].numel()
        return int(pixels) + (0 if self.text is None else self.text.padded_cost)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        pixels = () if self.pixel_values is None else (self.pixel_values,)
        return pixels + (() if self.text is None else self.text.tensors())

    def pin_memory(self) -> DualBatch:
        return self.map(lambda t: t if t.is_pinned() else t.pin_memory())

    def to(self, device: torch.device, *, non_blocking: bool = False) -> DualBatch:
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def map(self, fn: Any) -> DualBatch:
        pixels = None if self.pixel_values is None else fn(self.pixel_values)
        text = None if self.text is None else self.text.map(fn)
        return DualBatch(pixels, text, self.image_rows, self.text_rows)


class HFClip(ImageLoaded):
    """A loaded CLIP or SigLIP: ``embedding`` of a picture or a text, L2-normalised."""

    def __init__(self, spec: Any, device: torch.device) -> None:
        super().__init__(spec.name, spec.describe(), spec.path, device, spec.max_pixels)
        from transformers import AutoModel

        root = spec.path
        config = read_json(root / "config.json")
        self._text_length = spec.text_length()
        self._tokenizer = load_tokenizer(root, self._text_length)
        self._pad_id = _pad_id(root, self._tokenizer, config)
        self._full_padding = config.get("model_type") == "siglip"
        self._net = load_checked(AutoModel, root, device)

    def prepare(self, value: object) -> Any:
        """A text becomes its tokens; anything else must be a picture (see :meth:`prepare_image`)."""
        if not isinstance(value, str):
            return self.prepare_image(value)
        encoding = encode(self._tokenizer, coerce_text(value), False)
        if not encoding.ids:
            raise InputError(f"text gives no tokens under model {self.name!r}")
        return encoding

    def collate(self, items: Sequence[Any], multiple: int = 1) -> DualBatch:
        images = tuple(i for i, item in enumerate(items) if isinstance(item, PixelItem))
        texts = tuple(i for i, item in enumerate(items) if isinstance(item, Encoding))
        pixels = stack_pixels([items[i] for i in images]).pixel_values if images else None
        text = None
        if texts:
            width = self._text_length if self._full_padding else multiple
            text = collate_encodings([items[i] for i in texts], self._pad_id, width)
            if self._full_padding:
                text = ModelInputs(text.input_ids)  # SigLIP attends to its padding, as trained
        return DualBatch(pixels, text, images, texts)

    def run(self, batch: DualBatch) -> torch.Tensor:
        parts: list[tuple[tuple[int, ...], torch.Tensor]] = []
        if batch.pixel_values is not None:
            parts.append(
                (batch.image_rows, _pooled(self._net.get_image_features(pixel_values=batch.pixel_values)))
            )
        if batch.text is not None:
            text = self._net.get_text_features(
                input_ids=batch.text.input_ids, attention_mask=batch.text.attention_mask
            )
            parts.append((batch.text_rows, _pooled(text)))
        rows = len(batch.image_rows) + len(batch.text_rows)
        out = torch.empty((rows, parts[0][1].shape[1]), dtype=torch.float32, device=parts[0][1].device)
        for positions, vectors in parts:
            out[list(positions)] = torch.nn.functional.normalize(vectors.float(), dim=-1)
        return out

    def to_columns(self, outputs: torch.Tensor) -> Mapping[str, np.ndarray]:
        return {"embedding": outputs.numpy()}


def _pooled(out: Any) -> torch.Tensor:
    """A features call's vectors: transformers 4 returns them, 5 returns an output whose pooler holds them."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def _pad_id(root: Any, tokenizer: Any, config: Mapping[str, Any]) -> int:
    """The pad token ``tokenizer_config.json`` names (CLIP pads with ``<|endoftext|>``), else the usual."""
    named = read_json(root / "tokenizer_config.json").get("pad_token")
    token = named.get("content") if isinstance(named, dict) else named
    found = tokenizer.token_to_id(token) if isinstance(token, str) else None
    return int(found) if found is not None else pad_id(tokenizer, config)
