"""Every ``shardwise run`` option and every field of the score flow's form keeps its name and meaning.

The option list of ``shardwise run --help`` (flags, metavar, default, choices, help, group) and the
flow's parameter schema (as Prefect renders the form, with each section inlined so that renaming a
section's class changes nothing) are compared with golden files made from the code before the
parameters were declared once (issue 46). Regenerate them only for a change meant to show in the form
or the flags: ``python tests/flows/test_options_golden.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden"


def run_options() -> list[dict[str, Any]]:
    """Each option of ``shardwise run``, in ``--help`` order, as plain data."""
    from shardwise.flows.cli import _parser

    parser = _parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = action.choices["run"]
    titles = {id(a): g.title for g in run._action_groups for a in g._group_actions}
    options = []
    for option in run._actions:
        options.append(
            {
                "flags": list(option.option_strings),
                "metavar": option.metavar,
                "default": repr(option.default),
                "choices": None if option.choices is None else list(option.choices),
                "action": type(option).__name__,
                "required": option.required,
                "group": titles.get(id(option)),
                "help": option.help,
            }
        )
    return options


def form_schema() -> dict[str, Any]:
    """The score flow's parameter schema, each ``$ref`` replaced by the section it names (less its
    class name), so the golden file pins fields, not class names."""
    from prefect.utilities.callables import parameter_schema

    from shardwise.flows.score import score

    schema = parameter_schema(score.fn).model_dump()
    definitions = schema.pop("definitions", {}) or {}

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/definitions/"):
                target = dict(definitions[ref.rsplit("/", 1)[-1]])
                target.pop("title", None)
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return inline({**target, **rest})
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return inline(schema)  # type: ignore[no-any-return]


def _text(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=repr) + "\n"


def test_run_help_options_keep_their_names_metavars_and_defaults() -> None:
    assert _text(run_options()) == (GOLDEN / "run_options.json").read_text()


def test_the_form_keeps_every_field() -> None:
    assert _text(form_schema()) == (GOLDEN / "score_form.json").read_text()


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    (GOLDEN / "run_options.json").write_text(_text(run_options()))
    (GOLDEN / "score_form.json").write_text(_text(form_schema()))
