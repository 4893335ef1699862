"""Error messages quote at most 40 characters of a row's value, then only its type and size.

Dead letters are stored: a message that copied a JSON document or a long
text would make the dead-letter table a second copy of the data.
"""

from __future__ import annotations

import json

import pytest

from shardwise import Engine, InputError
from shardwise.model.text import PREVIEW_CHARS, UndecodableText, coerce_text, preview

SECRET = "card 4111-1111-1111-1111, ssn 078-05-1120"
JSONB = {"customer": {"name": "Ada Lovelace", "notes": "x" * 500}, "payment": SECRET}
"""A jsonb value as psycopg hands it back: a dict, long, with its sensitive part past the start."""
LONG_BLANK = " \t\n" * 2000


def message_of(value: object) -> str:
    with pytest.raises(InputError) as caught:
        coerce_text(value)
    return str(caught.value)


def test_a_short_value_is_quoted_whole() -> None:
    assert preview({"a": 1}) == "{'a': 1}"
    assert preview("x" * (PREVIEW_CHARS - 2)) == repr("x" * (PREVIEW_CHARS - 2))


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (JSONB, "dict of 2 items"),
        ("y" * 5000, "str of 5000 characters"),
        (b"z" * 300, "bytes of 300 bytes"),
        (list(range(1000)), "list of 1000 items"),
        (10**200, "int, 201 characters as repr"),
    ],
)
def test_a_long_value_gives_its_first_40_characters_then_type_and_size(value: object, size: str) -> None:
    shown = preview(value)
    assert shown == f"{repr(value)[:PREVIEW_CHARS]}... ({size})"


def test_a_jsonb_value_is_not_copied_into_the_message() -> None:
    message = message_of(JSONB)
    assert SECRET not in message and "x" * 50 not in message and "payment" not in message
    assert "got dict" in message and "(dict of 2 items)" in message
    assert len(message) < 200, message
    assert len(message_of(json.dumps(JSONB).encode("utf-16"))) < 200  # not UTF-8: no quote at all


def test_a_long_blank_text_is_not_copied_into_the_message() -> None:
    message = message_of(LONG_BLANK)
    assert "empty or only whitespace" in message and f"(str of {len(LONG_BLANK)} characters)" in message
    assert len(message) < 200, message


def test_a_long_key_of_an_undecodable_value_is_capped() -> None:
    key = "customer/" + SECRET * 5
    message = message_of(UndecodableText(b"\xff", key, "row group 0 of Parquet object 'f.parquet'"))
    assert SECRET not in message and f"(str of {len(key)} characters)" in message
    assert "row group 0 of Parquet object 'f.parquet'" in message


def test_engine_dead_letters_carry_capped_messages(tiny_model) -> None:
    rows = [(1, JSONB), (2, "a fine sentence"), (3, LONG_BLANK), (4, ["item " * 100] * 50)]
    results = list(Engine(tiny_model).run(rows))
    assert [r.ok for r in results] == [False, True, False, False]
    for result in results:
        if not result.ok:
            assert len(str(result.error)) < 200 and SECRET not in str(result.error)
