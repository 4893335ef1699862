"""Every command, option, repository path and code name the docs mention exists, so docs drift fails here.

The pages (``README.md`` and ``docs/**/*.md``) are read, not listed: their shell blocks and inline
code are parsed, and each ``shardwise COMMAND --flag`` is checked against the real parser
(``shardwise.flows.cli._parser()``), each ``python bench/x.py --flag`` against that script's own
options, each path that starts in one of the checkout's top folders against the checkout, each
dotted ``shardwise.module.name`` against the module's source, and each "`name` in `path`" against
that file. A flag renamed, a command dropped or a file moved on any branch fails after the merge.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent

_FENCED = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"`((?:[^`\n]|\n(?!\n))+)`")  # a span may wrap, not cross a paragraph
_SHELL = ("bash", "sh", "shell", "console", "")
_FLAG = re.compile(r"^--?[A-Za-z][\w-]*")
_PROSE_FLAG = re.compile(r"(?<![\w`-])--[a-z][a-z0-9-]*[a-z0-9]")
_LINK = re.compile(r"\]\(([^)\s]+)")


def _pages() -> dict[str, str]:
    pages = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").rglob("*.md"))]
    return {str(p.relative_to(CHECKOUT)): p.read_text() for p in pages}


@cache
def _tracked() -> frozenset[str]:
    """The checkout's files, as git tracks them (a stray build output is no file of the project)."""
    listed = subprocess.run(["git", "ls-files"], cwd=CHECKOUT, capture_output=True, text=True, check=True)
    return frozenset(listed.stdout.splitlines())


@cache
def _tops() -> frozenset[str]:
    """The checkout's top folders (``shardwise``, ``flows``, ``bench``, ``docs``, ``.ci`` ...)."""
    return frozenset(path.split("/")[0] for path in _tracked() if "/" in path)


@cache
def _folders() -> frozenset[str]:
    return frozenset(
        str(parent) for path in _tracked() for parent in Path(path).parents if str(parent) != "."
    )


@cache
def _commands() -> dict[str, set[str]]:
    """Each ``shardwise`` subcommand with its option strings; ``""`` holds the top level's."""
    from shardwise.flows.cli import _parser

    parser = _parser()
    found = {"": {flag for action in parser._actions for flag in action.option_strings}}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = {flag for a in sub._actions for flag in a.option_strings}
    return found


# ---- what the pages name ------------------------------------------------------------------------


def _code(page: str) -> tuple[list[str], list[str], str]:
    """A page's shell commands (continued lines joined), its inline code spans (a wrapped one on one
    line), and its prose."""
    shell: list[str] = []
    for lang, body in _FENCED.findall(page):
        if lang in _SHELL:
            for line in body.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                shell += [part for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line) if part]
    outside = _FENCED.sub("", page)
    spans = [" ".join(span.split()) for span in _INLINE.findall(outside)]
    return shell, spans, _INLINE.sub("", outside)


def _words(command: str) -> list[str]:
    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # an unclosed quote in an inline example: its words are still the words
        words = command.split()
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # NAME=value before the program
        words = words[1:]
    return words


def _flags(words: list[str]) -> list[str]:
    return [m.group(0) for word in words if (m := _FLAG.match(word))]


def _program(words: list[str]) -> tuple[str, list[str]] | None:
    """``("shardwise", rest)`` or ``("bench/x.py", rest)`` for a command of this project, else None."""
    if words and Path(words[0]).name == "shardwise":
        return "shardwise", words[1:]
    if words and _script(words[0]):  # `bench/whole.py --rounds 3`
        return words[0], words[1:]
    if len(words) > 1 and Path(words[0]).name.startswith("python"):
        if words[1:3] == ["-m", "shardwise"]:
            return "shardwise", words[3:]
        if _script(words[1]):
            return words[1], words[2:]
    return None


def _script(word: str) -> bool:
    """A ``.py`` file in one of the checkout's top folders (a user's own ``train.py`` is not ours)."""
    return word.endswith(".py") and word.split("/")[0] in _tops() and "/" in word


def _command_problems(command: str, declared: set[str]) -> Iterator[str]:
    """A command of this project: ``shardwise COMMAND`` with that command's options (or ``declared``,
    the page's own kind's), or a checkout script with its own."""
    found = _program(_words(command))
    if found is None:
        return
    program, rest = found
    if program != "shardwise":
        yield from _script_problems(program, rest)
        return
    commands = _commands()
    if not rest or rest[0].startswith("-"):
        flags, known, name = _flags(rest), commands[""], "shardwise"
    elif rest[0] in commands and rest[0]:
        flags, known, name = _flags(rest[1:]), commands[rest[0]], f"shardwise {rest[0]}"
    elif re.fullmatch(r"[a-z][a-z-]*", rest[0]):
        yield f"`shardwise {rest[0]}`: no such command ({', '.join(c for c in commands if c)})"
        return
    else:  # a placeholder such as COMMAND or ...
        return
    for flag in flags:
        if flag.split("=")[0] not in known | declared:
            yield f"`{name} {flag}`: {name} has no such option"


def _script_problems(script: str, rest: list[str]) -> Iterator[str]:
    path = CHECKOUT / script
    if script not in _tracked():
        yield f"`{script}`: no such file in the checkout"
        return
    source = path.read_text()
    for flag in _flags(rest):
        if not re.search(rf"""["']{re.escape(flag.split("=")[0])}["']""", source):
            yield f"`{script} {flag}`: {script} declares no such option"


def _declared_flags(page: str) -> set[str]:
    """The flags of the kind a page's own code declares (extending.md's example sink): each option field
    is a flag, ``jsonl_decimals`` is ``--jsonl-decimals``, as ``flag_name`` makes them."""
    from shardwise.flags import flag_name

    python = "".join(body for lang, body in _FENCED.findall(page) if lang == "python")
    return {flag_name(field, None) for field in re.findall(r"^ {4}(\w+): .*= Field\(", python, re.M)}


def _other_flags(shell: list[str], spans: list[str]) -> set[str]:
    """The flags a page may name on their own besides shardwise's: those its commands of other programs
    take (``pip install --no-deps``) and those the checkout's scripts it runs declare (``bench/whole.py``'s
    ``--rounds``)."""
    flags: set[str] = set()
    for command in [*shell, *spans]:
        words = _words(command)
        if not words or _FLAG.match(words[0]):
            continue
        found = _program(words)
        if found is None:
            flags |= {flag.split("=")[0] for flag in _flags(words)}
        elif found[0] != "shardwise" and found[0] in _tracked():
            flags |= set(re.findall(r"""["'](--[\w-]+)["']""", (CHECKOUT / found[0]).read_text()))
    return flags


def _option_problems(span: str, known: set[str]) -> Iterator[str]:
    """An inline ``--flag`` (or ``--flag VALUE``) on its own is an option of some shardwise command, or
    one of ``known``."""
    every = set().union(*_commands().values(), known)
    for flag in _flags(_words(span)[:1]):
        if flag.startswith("--") and flag.split("=")[0] not in every:
            yield f"`{flag}`: no shardwise command has this option"


# Paths: a word that starts in one of the checkout's top folders (or is a top-level file), not part
# of a longer path or URL (``s3://bucket/docs/``, ``/models/minilm``), and no placeholder.
_PATH_EDGE = r"(?<![\w./:@~$-])"


@cache
def _path_pattern() -> re.Pattern[str]:
    return re.compile(_PATH_EDGE + rf"((?:{'|'.join(map(re.escape, sorted(_tops())))})/[\w./*-]*)")


def _exists(path: str) -> bool:
    path = path.rstrip("/").rstrip(".")
    if "*" in path:
        return any(Path(tracked).match(path) for tracked in _tracked())
    return path in _tracked() or path in _folders()


def _path_problems(text: str) -> Iterator[str]:
    for path in _path_pattern().findall(text):
        if not _exists(path):
            yield f"`{path}`: no such file or folder in the checkout"


_NAME = r"[A-Za-z_][\w.]*(?:\(\))?"
_NAMED_IN = re.compile(rf"((?:`{_NAME}`(?:, |,? and |,? or ))*`{_NAME}`) (?:in|\() ?`([\w./-]+\.(?:py|sql))`")
_DOTTED = re.compile(r"(?<![\w./-])(shardwise(?:\.\w+)+)(?::(\w+))?")


@cache
def _package_dirs() -> dict[str, str]:
    """Where each package's files are: ``shardwise`` in ``shardwise/``, and the ``package-dir`` ones
    (``shardwise.flows`` in ``flows/``) as ``pyproject.toml`` installs them."""
    pyproject = (CHECKOUT / "pyproject.toml").read_text()  # no tomllib on Python 3.10
    (section,) = re.findall(r"^\[tool\.setuptools\.package-dir\]\n((?:.+\n)*)", pyproject, re.M)
    return {"shardwise": "shardwise", **dict(re.findall(r'^"([\w.]+)" = "([\w./-]+)"$', section, re.M))}


def _module_file(module: str) -> Path | None:
    """The source file of ``shardwise.a.b``, found in the checkout without importing it."""
    head = max((p for p in _package_dirs() if module == p or module.startswith(p + ".")), key=len)
    relative = _package_dirs()[head] + module[len(head) :].replace(".", "/")
    for candidate in (f"{relative}.py", f"{relative}/__init__.py"):
        if candidate in _tracked():
            return CHECKOUT / candidate
    return None


def _defines(source: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", source) is not None


def _dotted_problems(span: str) -> Iterator[str]:
    """``shardwise.a.b``, ``shardwise.a.b.name`` or ``shardwise.a.b:name``: the module, then the name in it.
    A dotted name whose second part is no module of the package (``shardwise.run.completed``, an event)
    is no module's name."""
    for dotted, attribute in _DOTTED.findall(span):
        parts = dotted.split(".")
        if _module_file(".".join(parts[:2])) is None:
            continue
        for cut in range(len(parts), 0, -1):
            if (path := _module_file(".".join(parts[:cut]))) is not None:
                break
        else:
            yield f"`{dotted}`: no such module in the checkout"
            continue
        names = [*parts[cut:], *([attribute] if attribute else [])]
        if names and not _defines(path.read_text(), names[0]):
            yield f"`{dotted}`: {path.relative_to(CHECKOUT)} defines no `{names[0]}`"


def _named_in_problems(text: str) -> Iterator[str]:
    """A "`name` in `path`" and "`name` (`path`)": the file names it (a function, class or constant)."""
    for names, path in _NAMED_IN.findall(text):
        if not _exists(path) or not (CHECKOUT / path).is_file():
            continue  # a missing file is the path check's to report, once
        source = (CHECKOUT / path).read_text()
        for name in re.findall(rf"`({_NAME})`", names):
            for part in name.removesuffix("()").split("."):
                if not _defines(source, part):
                    yield f"`{name}` in `{path}`: that file names no `{part}`"


_FILE_SUFFIXES = frozenset({"safetensors", "bin", "gguf", "json", "txt", "py", "yaml", "yml", "sql"})


def _parameter_problems(span: str) -> Iterator[str]:
    """A flow parameter by its dotted path (``run.dry_run``, ``model.endpoint``), as a deployment's YAML
    nests it: each part is a field of the section before it (a capitalised part is a placeholder)."""
    from pydantic import BaseModel

    from shardwise.flows.params import ScoreParams

    parts = span.split(".")
    if len(parts) < 2 or parts[0] not in ScoreParams.model_fields or not re.fullmatch(r"[\w.]+", span):
        return
    if parts[-1] in _FILE_SUFFIXES:  # `model.safetensors` is a file of a model directory
        return
    model: type[BaseModel] = ScoreParams
    for depth, part in enumerate(parts):
        if part.isupper():
            return
        if part not in model.model_fields:
            yield f"`{span}`: the flow's parameters have no `{'.'.join(parts[: depth + 1])}`"
            return
        annotation = model.model_fields[part].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return  # a value: what follows is its own (a mapping's key, an attribute)
        model = annotation


def _problems(page: str, text: str) -> list[str]:
    shell, spans, prose = _code(text)
    declared = _declared_flags(text)
    found: list[str] = []
    for command in [*shell, *spans]:
        found += _command_problems(command, declared)
    for span in spans:
        found += _dotted_problems(span)
        found += _parameter_problems(span)
    for code in [*spans, *(body for _, body in _FENCED.findall(text))]:
        found += _path_problems(code)
    found += _named_in_problems(_FENCED.sub("", text))
    known = declared | _other_flags(shell, spans)
    for span in spans:
        if not _program(_words(span)):
            found += _option_problems(span, known)
    for flag in _PROSE_FLAG.findall(re.sub(r"\[[^\]]*\]\([^)]*\)", "", prose)):
        found += _option_problems(flag, known)
    return [f"{page}: {problem}" for problem in dict.fromkeys(found)]


# ---- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("page", sorted(_pages()))
def test_every_command_option_path_and_name_a_page_mentions_exists(page: str) -> None:
    problems = _problems(page, _pages()[page])
    assert not problems, "\n".join(problems)


def test_the_checks_catch_each_kind_of_drift() -> None:
    """The checks above pass on pages that name nothing wrong; here each kind of drift is caught."""
    page = """
```bash
shardwise run --source sqlite:///x.db --table docs --dry-run
shardwise rescore --run RUN_ID
.venv/bin/python bench/whole.py --rows 10 --no-such-option
```

Give `--redrive` to score again; `shardwise redrive --run RUN_ID --force` is fine, as is --resume.
The merge is in `shardwise/results/merge.py`; `parse_table_name` in `shardwise/results/schema.py`;
`shardwise.flows.cli:no_such_function`; --no-such-flag in prose; tick `run.dry_runs`.
"""
    problems = "\n".join(_problems("page.md", page))
    for caught in (
        "`shardwise run --dry-run`",
        "`shardwise rescore`: no such command",
        "`bench/whole.py --no-such-option`",
        "`--redrive`: no shardwise command",
        "`shardwise/results/merge.py`: no such file",
        "`parse_table_name` in `shardwise/results/schema.py`",
        "defines no `no_such_function`",
        "`--no-such-flag`",
        "`run.dry_runs`: the flow's parameters have no `run.dry_runs`",
    ):
        assert caught in problems, (caught, problems)
    assert "--force" not in problems and "--resume" not in problems and "--rows" not in problems, problems


def test_the_readme_links_every_page_of_the_docs() -> None:
    """The README's table of the docs is the front page's map: a page missing from it is one nobody finds."""
    readme = (CHECKOUT / "README.md").read_text()
    linked = {link.split("#")[0] for link in _LINK.findall(readme)}
    pages = {p for p in _tracked() if p.startswith("docs/") and p.endswith(".md") and p != "docs/README.md"}
    assert len(pages) > 20, pages
    assert sorted(pages - linked) == [], "pages of the docs the README does not link"


@pytest.mark.parametrize("group", ["shardwise.sources", "shardwise.sinks"])
def test_the_top_level_help_names_every_source_and_sink_kind_shardwise_ships(group: str) -> None:
    """``shardwise --help`` is the first page a user reads: it names each kind this package registers
    (a plug-in's kinds are its own to describe)."""
    from importlib.metadata import entry_points

    from shardwise.flows.cli import _parser

    described = " ".join((_parser().description or "").lower().split())
    kinds = {
        ep.name for ep in entry_points(group=group) if ep.dist is not None and ep.dist.name == "shardwise"
    }
    assert len(kinds) >= 4, kinds
    assert sorted(kind for kind in kinds if kind not in described) == [], described


def test_the_pages_give_the_checks_something_to_check() -> None:
    """The checks above read what they should: many shardwise commands, paths and named things."""
    pages = _pages()
    commands = paths = named = 0
    for text in pages.values():
        shell, spans, _ = _code(text)
        commands += sum(
            1 for c in [*shell, *spans] if (found := _program(_words(c))) and found[0] == "shardwise"
        )
        paths += sum(len(_path_pattern().findall(span)) for span in spans)
        named += len(_NAMED_IN.findall(_FENCED.sub("", text)))
    assert commands > 100 and paths > 100 and named > 40, (commands, paths, named)
