"""A generator's chat template is tried once while planning (issue 39, item 8), from a model directory or
a GGUF file: with the special tokens its files declare, the run's system text and prompt, bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf_builders import write_gguf
from hf_builders import CHAT_TEMPLATE, tiny_causal_lm

from shardwise.errors import ConfigError
from shardwise.model.generation import GenerationSettings, PromptChecked
from shardwise.models import get_spec
from shardwise.models.hf.causal.chat_check import specials_of

pytest.importorskip("transformers")

NEEDS_BOS = (
    "{% if bos_token != '<s>' %}{{ raise_exception('no BOS: ' ~ bos_token) }}{% endif %}" + CHAT_TEMPLATE
)
"""Renders only when the tokenizer's own BOS, ``<s>``, is handed to it, as transformers does."""
NO_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    + CHAT_TEMPLATE
)


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), chat_template=NEEDS_BOS)


def test_the_directory_and_its_gguf_render_with_their_own_special_tokens(lm: Path, tmp_path: Path) -> None:
    assert specials_of(lm)["bos_token"] == "<s>"
    gguf = write_gguf(lm, tmp_path / "tiny.gguf", chat_template=NEEDS_BOS)
    for model in (str(lm), str(gguf)):
        spec = get_spec(model)
        assert isinstance(spec, PromptChecked)
        spec.check_prompts()  # passes: '<s>' reached the template


@pytest.mark.parametrize("form", ["directory", "gguf"])
def test_a_template_that_refuses_the_runs_system_text_is_refused_only_with_it(
    form: str, lm: Path, tmp_path: Path
) -> None:
    model = tiny_causal_lm(tmp_path / "lm", chat_template=NO_SYSTEM)
    if form == "gguf":
        model = write_gguf(model, tmp_path / "no-system.gguf", chat_template=NO_SYSTEM)
    spec = get_spec(str(model))
    assert isinstance(spec, PromptChecked)
    spec.check_prompts()  # no --system: the template renders
    with pytest.raises(ConfigError) as refused:
        spec.generating(GenerationSettings(system="Be brief.")).check_prompts()  # type: ignore[attr-defined]
    assert str(refused.value) == (
        f"the chat template of '{model}' does not render one prompt (TemplateError: System role not "
        "supported); fix the model's chat template, or give --chat off to send plain prompts"
    )
    spec.generating(GenerationSettings(system="Be brief.", chat="off")).check_prompts()  # type: ignore[attr-defined]
