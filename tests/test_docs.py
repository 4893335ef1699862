"""The docs site: its generated reference names every option and parameter, and it builds with --strict.

The command-line and parameter pages are written by ``docs/hooks/reference.py``
from ``shardwise.flows.cli._parser()`` and ``ScoreParams`` when the site builds;
these tests call the same functions, so a new option or field that the
reference misses fails here, and so does a broken link, a page missing from
the nav or a snippet include of a moved file (``mkdocs build --strict``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel

from shardwise.flows.params import ScoreParams

CHECKOUT = Path(__file__).resolve().parent.parent
HOOK = CHECKOUT / "docs" / "hooks" / "reference.py"


def _docs_extra() -> None:
    """Skip without the ``docs`` extra on a developer's machine; fail under CI, which installs it."""
    if importlib.util.find_spec("mkdocs") is None:
        reason = "mkdocs is not installed; pip install -e '.[docs]'"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(reason)
        pytest.skip(reason)


def _hook() -> ModuleType:
    """The MkDocs hook module, loaded from its file as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location("shardwise_docs_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    from shardwise.flows.cli import _parser

    (commands,) = (a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def _section(reference: str, command: str) -> str:
    """The part of the CLI reference about one subcommand: from its heading to the next one."""
    heading = f"## `shardwise {command}`\n"
    assert heading in reference, f"no section for shardwise {command}"
    return reference.split(heading, 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def cli_reference() -> str:
    return str(_hook().cli_reference())


@pytest.fixture(scope="module")
def parameters_reference() -> str:
    return str(_hook().parameters_reference())


def test_the_cli_reference_names_every_option_of_shardwise_run(cli_reference: str) -> None:
    section = _section(cli_reference, "run")
    flags = [flag for action in _subcommands()["run"]._actions for flag in action.option_strings]
    assert "--source" in flags and "--lease-s" in flags and "--runner" in flags, flags
    missing = [flag for flag in flags if not re.search(rf"`{re.escape(flag)}[ `]", section)]
    assert not missing, f"shardwise run options missing from the docs' reference: {missing}"


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_the_cli_reference_names_every_option_of_every_subcommand(cli_reference: str, command: str) -> None:
    section = _section(cli_reference, command)
    flags = [flag for action in _subcommands()[command]._actions for flag in action.option_strings]
    missing = [flag for flag in flags if not re.search(rf"`{re.escape(flag)}[ `]", section)]
    assert not missing, f"shardwise {command} options missing from the docs' reference: {missing}"


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any, bool]]:
    """Every field of the parameters by its dotted path, sections first, and whether it is a section."""
    found = []
    for name, info in model.model_fields.items():
        nested = isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
        found.append((f"{prefix}{name}", info, nested))
        if nested:
            found += _fields(info.annotation, f"{prefix}{name}.")
    return found


def test_the_parameter_reference_names_every_field_with_its_default(parameters_reference: str) -> None:
    for name in ScoreParams.model_fields:
        assert f"\n## `{name}`" in parameters_reference, f"section {name} is missing from the docs' reference"
    for path, info, nested in _fields(ScoreParams):
        heading = f"# `{path}`"
        assert heading in parameters_reference, f"ScoreParams.{path} is missing from the docs' reference"
        text = parameters_reference.split(heading, 1)[1].split("\n#", 1)[0]
        if nested:
            assert ("required" if info.is_required() else "each field at its default") in text, (path, text)
        else:
            default = "required" if info.is_required() else f"default `{info.default}`"
            assert default in text, (path, text)
    assert "option `--lease-s` of `shardwise run`" in parameters_reference
    assert "## `triggered_by` (internal)" in parameters_reference, "the form's title marks it internal"


def test_the_hook_replaces_each_marker_with_its_reference() -> None:
    hook = _hook()
    page = "# Flow parameters\n\n<!-- generated: parameters -->\n"
    rendered = hook.on_page_markdown(page, page=None, config=None, files=None)
    assert "<!-- generated" not in rendered and "### `run.lease_s`" in rendered
    pages = CHECKOUT / "docs" / "reference"
    assert "<!-- generated: cli -->" in (pages / "cli.md").read_text()
    assert "<!-- generated: parameters -->" in (pages / "parameters.md").read_text()
    assert set(hook.MARKERS) == {"<!-- generated: cli -->", "<!-- generated: parameters -->"}


@pytest.mark.slow
def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    _docs_extra()
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=CHECKOUT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "--lease-s" in cli and "shardwise watch" in cli
    models = (site / "how-to" / "models" / "index.html").read_text()
    assert "ClsEncoderSpec" in models and "--8&lt;--" not in models, "the plug-in example is included"


def _test_command(text: str) -> str:
    (line,) = (line for line in text.splitlines() if line.startswith("python3 -m venv") and "pytest" in line)
    return line


def test_the_readme_test_command_is_what_ci_runs_and_builds_the_docs() -> None:
    readme = (CHECKOUT / "README.md").read_text()
    command = _test_command(readme)
    assert command == _test_command((CHECKOUT / ".ci" / "run").read_text()), "word for word"
    assert command == _test_command((CHECKOUT / "docs" / "getting-started.md").read_text())
    assert "docs]'" in command and "NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict" in command, command


def test_the_docs_toolchain_is_pinned_to_the_material_release_line_docs_readme_names() -> None:
    pyproject = (CHECKOUT / "pyproject.toml").read_text()
    assert '"mkdocs-material>=9,<10"' in pyproject and '"mkdocs>=1.6,<2"' in pyproject
    notes = (CHECKOUT / "docs" / "README.md").read_text()
    assert "May 5, 2027" in notes and "Zensical" in notes and "NO_MKDOCS_2_WARNING" in notes


def test_the_readme_is_a_front_page_whose_links_into_the_docs_resolve() -> None:
    readme = (CHECKOUT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "the README is a front page; the rest belongs in docs/"
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "the README links into the docs"
    assert [link for link in links if not (CHECKOUT / link).is_file()] == []


_FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_MODEL = re.compile(r"--model[ =](\"[^\"]*\"|'[^']*'|[^\s`\\]+)")
_PATH_MARKS = ("/", "~", "./", "../", "hf:", "$")
_ENTRY_POINTS = re.compile(
    r'^\[project\.entry-points\."shardwise\.(?:models|model_kinds)"\]\n((?:[\w.-]+ = .*\n)+)', re.M
)


def _model_names(page: str) -> list[str]:
    """Every ``--model VALUE`` of a page's shell blocks and inline code, quotes removed."""
    shell = [body for lang, body in _FENCED.findall(page) if lang in ("bash", "sh", "shell", "console", "")]
    inline = re.findall(r"`([^`\n]+)`", _FENCED.sub("", page))
    return [m.strip("\"'") for text in (*shell, *inline) for m in _MODEL.findall(text)]


def _registered(page: str) -> set[str]:
    """The model names a page's own ``pyproject.toml`` example registers as plug-ins or model kinds (a
    kind's name is the ``--model`` value the example's kind claims)."""
    return {line.split(" = ")[0] for block in _ENTRY_POINTS.findall(page) for line in block.splitlines()}


def _model_problem(name: str, known: set[str]) -> str | None:
    """Why ``name`` would not work as ``--model``, or None: a known name (built-in, installed plug-in, or
    one the page registers), a path or ``hf:`` path (``/models/...``, ``$SMOLLM2``), a capitalised
    placeholder (``PATH``), a remote model (``openai:NAME``), or a ``package.module:attribute`` reference."""
    from shardwise.models.endpoints import is_endpoint_name
    from shardwise.models.plugins.specs import is_reference

    if name in known or name.startswith(_PATH_MARKS) or name.isupper() or is_reference(name):
        return None
    if is_endpoint_name(name):
        return None
    return f"not a known model ({', '.join(sorted(known))}), a path, a placeholder or a module:attribute"


def test_every_model_named_in_the_docs_examples_is_one_shardwise_takes() -> None:
    from shardwise.models import known_models

    pages = {
        p.relative_to(CHECKOUT): p.read_text()
        for p in [CHECKOUT / "README.md", *(CHECKOUT / "docs").rglob("*.md")]
    }
    named = {(page, name) for page, text in pages.items() for name in _model_names(text)}
    assert len(named) > 10 and {name for _, name in named} >= {"minilm", "mobilenet-v2"}, named
    problems = [
        f"{page}: --model {name}: {why}"
        for page, name in sorted(named)
        if (why := _model_problem(name, {*known_models(), *_registered(pages[page])}))
    ]
    assert not problems, "\n".join(problems)
    assert _model_problem("clip-vit-b32", set(known_models())), "a name that is no model is caught"
