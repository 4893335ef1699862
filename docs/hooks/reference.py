"""MkDocs hook: the command-line and parameter reference, generated from the code when the site builds.

The pages ``reference/cli.md`` and ``reference/parameters.md`` hold a marker
line (``<!-- generated: cli -->`` or ``<!-- generated: parameters -->``) that
this hook replaces with markdown written from the ``shardwise`` parser
(``shardwise.flows.cli._parser()``: every subcommand, every option with its
help, default and choices) and from the flow's parameter model
(``shardwise.flows.params.ScoreParams``: every section, and every field in it
with its type, default, limits and description). Nothing in those pages is copied by hand, so they
cannot drift from ``--help`` and the Prefect UI's form. ``tests/test_docs.py``
calls :func:`cli_reference` and :func:`parameters_reference` directly.
"""

from __future__ import annotations

import argparse
import re
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

__all__ = ["MARKERS", "cli_reference", "on_page_markdown", "parameters_reference"]

_MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]])")


def cli_reference() -> str:
    """Markdown for every ``shardwise`` subcommand: what it does, its example, and each option."""
    from shardwise.flows.cli import _parser

    parser = _parser()
    lines = [_text(parser.description or ""), ""]
    for name, sub in _subcommands(parser).items():
        lines += [f"## `shardwise {name}`", "", f"```text\n{sub.format_usage().strip()}\n```", ""]
        lines += [_description(sub.description or ""), ""]
        for group in sub._action_groups:
            actions = [a for a in group._group_actions if a.option_strings]
            if not actions:
                continue
            if group.title not in ("options", "optional arguments"):
                lines += [f"**{_text(group.title or '')}**: {_text(group.description or '')}", ""]
            lines += [_option(sub, action) for action in actions]
            lines.append("")
    lines += ["## Exit codes", "", _text(parser.epilog or ""), ""]
    return "\n".join(lines)


def parameters_reference() -> str:
    """Markdown for every field of :class:`ScoreParams`, section by section: name, type, default, limits,
    option, description. A section's heading is one level above its fields' (``## source``, then
    ``### source.table``); each field is named by its dotted path, as a deployment's YAML nests it."""
    from shardwise.flows.cli import _parser
    from shardwise.flows.params import ScoreParams

    options = _param_options(_parser())
    lines = [_text(ScoreParams.__doc__ or ""), ""]
    for name, info in ScoreParams.model_fields.items():
        lines += _field_reference(name, info, 2, options)
    return "\n".join(lines)


def _field_reference(
    path: str, info: Any, level: int, options: dict[str, tuple[str, list[str]]]
) -> list[str]:
    """A field's heading (``level`` deep, at most 6), facts and description; a section's fields follow it,
    one level deeper."""
    heading = "#" * min(level, 6) + f" `{path}`{_title(path.rsplit('.', 1)[-1], info.title)}"
    annotation = info.annotation
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return [heading, "", _facts(info, options.get(path)), "", _text(info.description or ""), ""]
    about = info.description or annotation.__doc__ or ""
    lines = [heading, "", _section_facts(info), "", _text(" ".join(about.split())), ""]
    for name, inner in annotation.model_fields.items():
        lines += _field_reference(f"{path}.{name}", inner, level + 1, options)
    return lines


def _section_facts(info: Any) -> str:
    """A section's one sentence: required, or what its fields default to."""
    kind = f"section `{info.annotation.__name__}`"
    return f"{kind}; required." if info.is_required() else f"{kind}; each field at its default unless given."


def _facts(info: Any, option: tuple[str, list[str]] | None) -> str:
    """A field's type, default, limits and command-line option, as one sentence."""
    facts = [f"type `{_type_name(info.annotation)}`"]
    facts.append("required" if info.is_required() else f"default `{info.default}`")
    facts += [f"`{limit}`" for limit in _limits(info.metadata)]
    if option is not None:
        flag, commands = option
        facts.append(f"option `{flag}` of {', '.join(f'`shardwise {c}`' for c in commands)}")
    else:
        facts.append("no command-line option")
    return "; ".join(facts) + "."


MARKERS = {"<!-- generated: cli -->": cli_reference, "<!-- generated: parameters -->": parameters_reference}
"""Each marker line a page may hold, and the function whose markdown replaces it."""


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: replace each marker line of a page with its generated markdown."""
    for marker, generate in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def _option(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """One option as a list item: its spellings (choices included), help, and whether it is required.

    The default is added where the help does not state it already (the parameter
    options' help states theirs, from the model).
    """
    spelled = ", ".join(f"`{_spelling(flag, action)}`" for flag in action.option_strings)
    text = _help(parser, action)
    if action.required:
        text += " (required)"
    elif action.default not in (None, False, argparse.SUPPRESS) and "default" not in text.lower():
        text += f" (default: {action.default})"
    return f"- {spelled}: {_text(text)}"


def _spelling(flag: str, action: argparse.Action) -> str:
    if action.nargs == 0:
        return flag
    if action.metavar is not None:
        return f"{flag} {action.metavar}"
    if action.choices is not None:
        return f"{flag} {{{','.join(map(str, action.choices))}}}"
    return f"{flag} {action.dest.upper()}"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as ``--help`` prints it (argparse's %-expansion applied), on one line."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return " ".join(parser._get_formatter()._expand_help(action).split())


def _param_options(parser: argparse.ArgumentParser) -> dict[str, tuple[str, list[str]]]:
    """Each parameter's option and the subcommands that take it, from the parser itself."""
    from shardwise.flows.params import ScoreParams

    found: dict[str, tuple[str, list[str]]] = {}
    for name, sub in _subcommands(parser).items():
        for action in sub._actions:  # a parameter's option has its field's dotted path as its dest
            field = action.dest.split(".", 1)[0]
            if field in ScoreParams.model_fields and action.default is argparse.SUPPRESS:
                found.setdefault(action.dest, (action.option_strings[-1], []))[1].append(name)
    return found


def _description(text: str) -> str:
    """A subcommand's description: its prose joined into a paragraph, its example as a code block."""
    about, _, example = text.partition("\n\nexample:\n")
    prose = _text(" ".join(about.split()))
    return f"{prose}\n\nExample:\n\n```bash\n{example.strip()}\n```" if example else prose


def _type_name(annotation: Any) -> str:
    """``str | None``, ``int``, or a Literal's values: how a reader would write the type."""
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        return " | ".join(_type_name(arg) for arg in get_args(annotation))
    if origin is Literal:
        return " | ".join(repr(arg) for arg in get_args(annotation))
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _title(name: str, title: str | None) -> str:
    """What a field's form title adds to its name: ``triggered_by (internal)`` adds `` (internal)``."""
    if not title or title == name:
        return ""
    extra = title.removeprefix(name).strip()
    return f" {_text(extra)}" if extra.startswith("(") else f" ({_text(title)})"


def _limits(metadata: list[Any]) -> list[str]:
    """Pydantic's constraints on a field (``ge``, ``le``, ``pattern`` ...) as ``>= 1`` and so on."""
    symbols = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "pattern": "matches"}
    found = []
    for constraint in metadata:
        for attribute, symbol in symbols.items():
            value = getattr(constraint, attribute, None)
            if value is not None:
                found.append(f"{symbol} {value}")
    return found


def _text(text: str) -> str:
    """Prose for markdown: the characters that would start emphasis, code or a link are escaped."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text).replace("<", "&lt;")
