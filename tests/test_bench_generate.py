"""``bench/generate.py``'s options: bad ones are refused in one line, exit 2, before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "0"], "--rounds 0"),
        (["--offset", "-1"], "--offset -1: give 0 or more rows to skip"),
        (
            ["--engine", "vllm", "--rounds", "3"],
            "--rounds is for --engine hf; with --engine vllm give --repeat",
        ),
        (["--also", "two-pass"], "--also takes bf16, int8, weight-int8, one-pass; got two-pass"),
    ],
)
def test_bad_options_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import generate

    with pytest.raises(SystemExit) as exit_:
        generate._arguments(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_held_out_rows_are_the_ones_after_the_offset(tmp_path: Path) -> None:
    from bench import generate

    corpus = tmp_path / "texts.jsonl"
    corpus.write_text("".join(f'{{"text": "row {i} words"}}\n' for i in range(10)))
    args = generate._arguments(["--corpus", str(corpus), "--offset", "6", "--limit", "3", "--max-chars", "5"])
    assert generate._texts(args) == ["row 6", "row 7", "row 8"]
