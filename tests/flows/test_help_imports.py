"""``shardwise --help`` prints without importing torch, transformers or Prefect.

The parser is built from the flow's parameters (``flows/params.py``), whose
defaults and checks come from the engine: chunk sizes, precisions, guard
thresholds, lease limits, the model names. Those modules import torch only in
the functions that run a model, so help prints in a fraction of a second, not
after the 1-3 s torch takes to import on two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_HEAVY = ("torch", "transformers", "prefect")

_PROBE = """
import contextlib, io, json, sys
from shardwise.flows.cli import main
with contextlib.redirect_stdout(io.StringIO()) as shown, contextlib.suppress(SystemExit):
    main({argv})
assert "usage: shardwise" in shown.getvalue(), shown.getvalue()
print(json.dumps(sorted(name for name in {heavy} if name in sys.modules)))
"""


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["plan", "--help"]], ids=" ".join)
def test_help_imports_no_heavy_package(argv: list[str]) -> None:
    probe = _PROBE.format(argv=repr(argv), heavy=_HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [], done.stdout


def test_the_model_catalogue_names_its_models_without_loading_them() -> None:
    probe = (
        "import sys; from shardwise.models import CATALOGUE, check_deployment_model, known_models; "
        "check_deployment_model('tiny', None); "
        "print(sorted(CATALOGUE), 'tiny' in known_models(), 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['minilm',", "'tiny']", "True", "False"], done.stderr
