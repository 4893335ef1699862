"""The half of the model contract that every tokenizer-based model shares: prepare and collate text.

A text model's item is an :class:`~shardwise.model.Encoding` (its cost is
its token count) and its batch a :class:`~shardwise.model.ModelInputs`,
padded on the right. :class:`TextModel` gives ``prepare`` and ``collate``
from one method, :meth:`TextModel.encode`; a model adds ``run`` and
``to_columns``.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardwise.batch.collate import collate_encodings
from shardwise.errors import InputError
from shardwise.model import Encoding, ModelInputs, TextInput
from shardwise.model.text import coerce_input

__all__ = ["TextModel"]


class TextModel:
    """Base for text models: set :attr:`name` and :attr:`pad_id`, implement :meth:`encode`."""

    name: str
    pad_id: int

    def encode(self, text: TextInput) -> Encoding:
        """Token ids of a text or ``(text, text_pair)``, special tokens included, cut to the model's limit.

        A pair is cut as a whole, longest member first, and carries
        :attr:`Encoding.type_ids` where the model uses them.
        """
        raise NotImplementedError

    def prepare(self, value: object) -> Encoding:
        """Check a row's value (text, or a :class:`~shardwise.model.text.Inputs`) and tokenise it.

        A value that is not usable text, or that gives no tokens, raises an
        :class:`InputError` saying why: its row becomes a dead letter.
        """
        encoding = self.encode(coerce_input(value))
        if not encoding.ids:
            raise InputError(
                f"text gives no tokens under model {self.name!r}; it holds nothing the tokenizer keeps"
            )
        return encoding

    def collate(self, items: Sequence[Encoding], multiple: int = 1) -> ModelInputs:
        """Pad the encodings to their own longest (rounded up to ``multiple``); a mask if any is padded."""
        return collate_encodings(items, self.pad_id, multiple)
