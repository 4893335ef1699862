"""A generator's engine is one of its settings: ``--engine`` and ``--engine-option`` on the command line,
``model.generation.engine`` and ``engine_options`` in the flow's parameters (the UI form)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ledger_runs, one_line
from pydantic import ValidationError

from shardwise.flows.cli import _parser, main
from shardwise.flows.cli_options import score_params
from shardwise.flows.params import ScoreParams


def _spec(*options: str):  # -> RunSpec
    args = _parser().parse_args(["run", "--source", "sqlite:///x.db", "--table", "docs", *options])
    return score_params(args).to_spec()


def test_the_engine_and_its_options_reach_the_generation_settings() -> None:
    spec = _spec(
        "--engine", "vllm", "--engine-option", "max_num_seqs=8", "--engine-option", " dtype = float32"
    )
    assert spec.model.generation is not None and spec.model.generation.engine == "vllm"
    assert spec.model.generation.engine_settings() == {"dtype": "float32", "max_num_seqs": "8"}
    assert _spec().model.generation is None  # nothing given: a generator keeps its own settings
    assert _spec("--engine", "hf").model.generation.engine == "hf"  # type: ignore[union-attr]


def test_the_form_takes_them_nested_under_the_model() -> None:
    params = ScoreParams.model_validate(
        {
            "source": {"location": "sqlite:///x.db"},
            "model": {"name": "m", "generation": {"engine": "vllm", "engine_options": ["max_model_len=512"]}},
        }
    )
    assert params.to_spec().model.generation.engine_options == (("max_model_len", "512"),)  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="engine option 'max_model_len' is not NAME=VALUE"):
        ScoreParams.model_validate(
            {
                "source": {"location": "sqlite:///x.db"},
                "model": {"generation": {"engine": "vllm", "engine_options": ["max_model_len"]}},
            }
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--engine-option", "max_num_seqs=8"],
            "engine hf takes none; give --engine vllm, or drop --engine-option",
        ),
        (["--engine", "vllm", "--engine-option", "=8"], "engine option '=8' is not NAME=VALUE"),
    ],
)
def test_a_bad_engine_option_is_one_line_before_anything_runs(
    docs: str, options: list[str], message: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--source", docs, "--table", "docs", "--model", "tiny", *options])
    err = one_line(capfd)
    assert code == 2, err
    assert message in err, err
    assert ledger_runs(docs) == 0


WITHOUT_VLLM = """
import sys
sys.modules["vllm"] = None  # as where it is not installed: importlib.util.find_spec("vllm") is None
from shardwise.flows.cli import main
code = main(sys.argv[1:])
print(code, "torch" in sys.modules, "transformers" in sys.modules)
"""


def test_a_missing_vllm_is_refused_before_torch_or_the_model_loads(docs: str, tmp_path: Path) -> None:
    """Issue 45: the refusal took 26.7 s (others 5 s): it waited for the run's checks, which import torch
    and read the model's files before they find that the engine's package is missing."""
    from hf_builders import tiny_causal_lm

    lm = tiny_causal_lm(tmp_path / "lm")
    argv = ["run", "--source", docs, "--table", "docs", "--model", str(lm), "--engine", "vllm"]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_VLLM, *argv], capture_output=True, text=True, timeout=300
    )
    assert done.stdout.split() == ["2", "False", "False"], done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "the vllm package is not installed; pip install vllm (a CUDA machine)" in line, line
    assert line.endswith("or give --engine hf"), line
    assert ledger_runs(docs) == 0
