"""A chat template or a JSON Schema no row can get through is refused while planning (issue 39, item 8):
one line naming the problem and the fix, exit 2, no run in the ledger and no flow run. Before, a broken
or hostile chat template failed inside the first shard, and a schema admitting no value made every row a
dead letter of a run that exited 0."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cli_helpers import flow_runs, ledger_runs, one_line
from hf_builders import CHAT_TEMPLATE, tiny_causal_lm

from shardwise.flows.cli import main
from shardwise.models.hf.causal.chat_check import RENDER_S

pytestmark = pytest.mark.usefixtures("prefect_harness")
pytest.importorskip("transformers")

TEMPLATES = {
    "syntax": ("{% for m in messages %}{{ m['content'] }", "(TemplateSyntaxError: unexpected '}')"),
    "sandbox": (
        "{{ messages.__class__.__mro__[1].__subclasses__() }}",
        "(SecurityError: access to attribute '__class__' of 'list' object is unsafe.)",
    ),
    "system role": (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}" + CHAT_TEMPLATE,
        "(TemplateError: System role not supported)",
    ),
    "memory": ("{{ 'x' * 10**9 }}", "took more than 512 MiB to render one prompt"),
    "size": ("{% for i in range(100000) %}{{ 'x' * 20 }}{% endfor %}", "renders 2,000,000 characters"),
    "endless": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        f"did not render one prompt within {RENDER_S:g} s",
    ),
}


def _refused(argv: list[str], url: str, capfd: pytest.CaptureFixture[str]) -> str:
    before = flow_runs()
    capfd.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage error: a --json-schema file is checked as it is read
        code = exc.code
    err = one_line(capfd)
    assert code == 2, err
    assert ledger_runs(url) == 0
    assert flow_runs() == before
    return err


def _run(url: str, model: Path, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(model), "--results-table", "generated",
        "--max-new-tokens", "8", "--precision", "fp32", "--shards", "1", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("case", list(TEMPLATES))
def test_a_chat_template_that_cannot_render_a_prompt_is_refused_before_the_run(
    case: str, docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    template, said = TEMPLATES[case]
    model = tiny_causal_lm(tmp_path / "lm", chat_template=template)
    started = time.monotonic()
    err = _refused(_run(docs, model, "--system", "Be brief."), docs, capfd)
    assert time.monotonic() - started < RENDER_S + 20  # bounded: the endless one is cut at RENDER_S
    assert err.startswith(f"shardwise: error: the chat template of '{model}' "), err
    assert said in err, err
    assert err.endswith("fix the model's chat template, or give --chat off to send plain prompts"), err


def test_a_sound_chat_template_passes_and_chat_off_skips_a_broken_one(
    docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The check refuses nothing that renders, and --chat off, the fix it names, is not refused."""
    sound = tiny_causal_lm(tmp_path / "sound", chat_template=CHAT_TEMPLATE)
    assert main(["plan", *_run(docs, sound, "--system", "Be brief.")[1:]]) == 0
    broken = tiny_causal_lm(tmp_path / "broken", chat_template=TEMPLATES["syntax"][0])
    assert main(["plan", *_run(docs, broken, "--chat", "off")[1:]]) == 0
    assert main(["plan", *_run(docs, broken)[1:]]) == 2  # the plan refuses what the run would
    capfd.readouterr()


EMPTY_SCHEMAS = {
    "crossed lengths": (
        {"type": "string", "minLength": 5, "maxLength": 2},
        "at #, minLength 5 is above maxLength 2",
    ),
    "no common type": (
        {"allOf": [{"type": "string"}, {"type": "integer"}]},
        "at #, its types and its allOf branches' types have no value in common",
    ),
    "false": (False, "at #, the schema false admits no value"),
    "empty enum": ({"enum": []}, "at #, enum is empty"),
    "required false": (
        {"type": "object", "properties": {"label": False}, "required": ["label"]},
        "at #/properties/label, the schema false admits no value, and property 'label' is required",
    ),
}


@pytest.mark.parametrize("unconstrained", [False, True], ids=["constrained", "unconstrained"])
@pytest.mark.parametrize("case", list(EMPTY_SCHEMAS))
def test_a_json_schema_that_admits_no_value_is_refused_before_the_run(
    case: str, unconstrained: bool, docs: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    schema, said = EMPTY_SCHEMAS[case]
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    model = tiny_causal_lm(tmp_path / "lm")
    extra = ["--chat", "off", "--json-schema", str(path), *(["--unconstrained"] if unconstrained else [])]
    err = _refused(_run(docs, model, *extra), docs, capfd)
    assert "json_schema admits no value, so every row would fail: " in err, err
    assert said in err, err
    assert err.startswith("shardwise run: error: argument --json-schema: json_schema admits no value"), err
    assert "fix the schema so that some JSON value satisfies it" in err, err


def test_a_run_started_as_the_ui_starts_it_meets_a_broken_template_while_planning(
    docs: str, tmp_path: Path
) -> None:
    """The form and the API start the flow without the command line's checks: planning refuses it."""
    from shardwise.flows.params import ScoreParams
    from shardwise.flows.score import score

    broken = tiny_causal_lm(tmp_path / "broken", chat_template=TEMPLATES["syntax"][0])
    params = ScoreParams.model_validate(
        {
            "source": {"location": docs, "table": "docs"},
            "model": {"name": str(broken), "generation": {"max_new_tokens": 8}},
            "results": {"table": "generated"},
            "run": {"precision": "fp32", "shards": 1},
        }
    )
    state = score(params, return_state=True)
    assert state.is_failed()
    assert "TemplateSyntaxError" in str(state.message) and "--chat off" in str(state.message)
    assert ledger_runs(docs) == 0, "refused before the run was recorded"
