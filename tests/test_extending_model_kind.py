"""The extending page's model kind (``--model text-length`` with ``--count-unit``), taken from the page.

The fast tests import the page's ``text_length_kind.py`` and check what the page says of it. The slow one
copies the section's titled files into a package outside the repository, installs it beside the venv
(``pip --target``, offline, as ``test_extending_example`` does), and with the package on ``PYTHONPATH``
finds its option in ``shardwise run --help`` and in the flow's form, and runs the section's bash block.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from page_examples import install, last_bash, titled

from shardwise.errors import ConfigError, InputError
from shardwise.model.kinds import ModelKind
from shardwise.retry_policy import RetryPolicy

FOLDER = "text-length-kind"
DOCS = [(1, "one"), (2, "two words"), (3, "three short words"), (4, "naïve café au lait")]


def _titled() -> dict[str, str]:
    return titled(FOLDER)


@pytest.fixture(scope="module")
def kind_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The page's ``text_length_kind.py``, imported from a copy outside the repository."""
    path = tmp_path_factory.mktemp("module") / "text_length_kind.py"
    path.write_text(_titled()["text_length_kind.py"])
    spec = importlib.util.spec_from_file_location("text_length_kind", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["text_length_kind"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["text_length_kind"]


def test_the_kind_claims_its_name_and_its_option_changes_the_counts(kind_module: ModuleType) -> None:
    kind = kind_module.KIND
    assert isinstance(kind, ModelKind) and kind.name == "text-length" and kind.section == "count"
    assert kind.claims("text-length") and not kind.claims("tiny") and not kind.claims("openai:m")
    assert list(kind.options.model_fields) == ["count_unit"]
    chars = kind.spec("text-length")
    words = chars.bound({"count_unit": "words"}, lambda ref: ref, RetryPolicy())
    assert chars.describe().version != words.describe().version, "the unit is part of the version"
    assert [c.name for c in words.describe().outputs] == ["length", "bytes"]
    texts = ["three short words", "naïve café"]
    cpu = torch.device("cpu")
    assert chars.load(cpu).score_window(texts) == [{"length": 17, "bytes": 17}, {"length": 10, "bytes": 12}]
    counted = words.load(cpu).score_window([*texts, None])
    assert counted[:2] == [{"length": 3, "bytes": 17}, {"length": 2, "bytes": 12}]
    assert isinstance(counted[2], InputError), "a null is a dead letter"
    with pytest.raises(ConfigError, match="not valid"):
        chars.bound({"count_unit": "lines"}, lambda ref: ref, RetryPolicy())


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The section's package, built offline and installed under a folder of its own outside the
    repository; the folder the section's commands run in, and their environment."""
    root = tmp_path_factory.mktemp("extending-model")
    return root, install(root, FOLDER, {"pyproject.toml", "text_length_kind.py"}, DOCS)


@pytest.mark.slow
def test_the_page_model_kind_shows_its_option_and_runs(installed: tuple[Path, dict[str, str]]) -> None:
    root, env = installed
    proc = subprocess.run(
        ["shardwise", "run", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"text-length model:.*--count-unit \{chars,words\}", proc.stdout, re.S), proc.stdout

    schema = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from shardwise.flows.params import ScoreParams; "
            "print(json.dumps(ScoreParams.model_json_schema()))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert schema.returncode == 0, schema.stderr
    defs = json.loads(schema.stdout)["$defs"]
    assert "count" in defs["ModelParams"]["properties"], defs["ModelParams"]["properties"]
    assert defs["CountOptions"]["properties"]["count_unit"]["enum"] == ["chars", "words"]

    _, *commands = last_bash(FOLDER).splitlines()  # the pip line is done: beside the venv
    script = "\n".join(commands)
    assert "--model text-length --count-unit words" in script
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    with sqlite3.connect(root / "out" / "results.db") as db:
        rows = db.execute("select source_key, length, bytes from shardwise_results order by 1").fetchall()
    expected = [(k, len(t.split()), len(t.encode())) for k, t in DOCS if t]
    assert rows == expected, rows

    refused = subprocess.run(
        ["shardwise", "run", "--source", env["SOURCE_URL"], "--table", "docs", "--model", "tiny",
         "--count-unit", "words", "--results", f"sqlite:///{root}/other.db"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "--count-unit would do nothing: it applies to the text-length model" in refused.stderr, (
        refused.stderr
    )
