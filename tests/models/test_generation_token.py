"""A generator's settings text (:meth:`GenerationSettings.token`) is part of its model version: the same
settings must give the same bytes across releases, or ``--only-new`` rescores every row."""

from __future__ import annotations

from typing import Any

import pytest

from shardwise.model.generation import GenerationSettings

_SCHEMA = '{"type": "object",  "properties": {"a": {"type": "integer"}}}'


@pytest.mark.parametrize(
    ("given", "token"),
    [
        (
            {},
            '{"chat": "auto", "max_new_tokens": 128, "prompt": "{text}", "system": null, "temperature": 0.0}',
        ),
        (
            {"prompt": "Q: {title} {text}", "system": "Be brief.", "chat": "off", "max_new_tokens": 64},
            '{"chat": "off", "max_new_tokens": 64, "prompt": "Q: {title} {text}", "system": "Be brief.", '
            '"temperature": 0.0}',
        ),
        (
            {"temperature": 0.7, "top_p": 0.9, "seed": 3},
            '{"chat": "auto", "max_new_tokens": 128, "prompt": "{text}", "seed": 3, "system": null, '
            '"temperature": 0.7, "top_p": 0.9}',
        ),
        (
            {"temperature": 1, "json_schema": _SCHEMA, "constrained": False},
            '{"chat": "auto", "constrained": false, "json_schema": "{\\"properties\\":{\\"a\\":{\\"type\\":'
            '\\"integer\\"}},\\"type\\":\\"object\\"}", "max_new_tokens": 128, "prompt": "{text}", '
            '"seed": 0, "system": null, "temperature": 1.0, "top_p": 1.0}',
        ),
        (
            {"engine": "vllm", "engine_options": {"max_num_seqs": 8}},
            '{"chat": "auto", "engine": "vllm", "max_new_tokens": 128, "prompt": "{text}", "system": null, '
            '"temperature": 0.0}',
        ),
    ],
)
def test_the_settings_text_stays_byte_identical(given: dict[str, Any], token: str) -> None:
    assert GenerationSettings(**given).token() == token
