"""A model takes what the source gives it, or the run is refused before anything is planned.

Every built-in model declares what it scores (texts, pictures, or both for
CLIP); ``check_run`` (the command line's checks) and ``prepare_run`` (a run
started from the UI or the API, which skips them) refuse an image column or
folder given to a text model, a text column given to an image model, and a
binary column of pictures read as text by a text model, with nothing written
to the ledger; what a model can take still runs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hf_builders import tiny_causal_lm, tiny_classifier, tiny_encoder
from image_builders import encoded, picture, tiny_clip, tiny_vit_classifier, tiny_vit_encoder
from spec_builder import flat_spec

from shardwise.errors import ConfigError
from shardwise.model import IMAGES, TEXT, ModelInfo, OutputColumn
from shardwise.models import get_spec
from shardwise.models.plugins.mobilenet import weights_file
from shardwise.pipeline import RunSpec, check_run
from shardwise.pipeline.model_inputs import check_model_inputs
from shardwise.pipeline.spec import as_is
from shardwise.results import Ledger
from shardwise.sources.base import SourceValues

OUT = (OutputColumn("embedding", "vector", 4),)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "vit": tiny_vit_classifier(root / "vit"),
        "vit-encoder": tiny_vit_encoder(root / "vit-encoder"),
        "clip": tiny_clip(root / "clip"),
        "encoder": tiny_encoder(root / "encoder"),
        "classifier": tiny_classifier(root / "classifier"),
        "causal": tiny_causal_lm(root / "causal"),
    }


def test_every_built_in_model_says_what_it_scores(dirs: dict[str, Path]) -> None:
    declared = {name: get_spec(str(path)).describe().inputs for name, path in dirs.items()}
    assert declared == {
        "vit": IMAGES,
        "vit-encoder": IMAGES,
        "clip": TEXT | IMAGES,
        "encoder": TEXT,
        "classifier": TEXT,
        "causal": TEXT,
    }
    assert get_spec("tiny").describe().inputs == TEXT
    if weights_file() is not None:
        assert get_spec("mobilenet-v2").describe().inputs == IMAGES


@pytest.mark.parametrize("inputs", [{"text"}, frozenset(), frozenset({"audio"}), ("text",)])
def test_model_info_refuses_inputs_it_cannot_mean(inputs: object) -> None:
    with pytest.raises(
        ConfigError, match=r"model 'm': inputs must be a non-empty frozenset of 'text', 'image'"
    ):
        ModelInfo("m", "v1", OUT, 8, inputs=inputs)  # type: ignore[arg-type]


def _given(kind: str, column: str | None = "c") -> SourceValues:
    return SourceValues(
        kind, f"{kind} column 'c' of t", column, "a BLOB column, and ..." if kind == "bytes" else ""
    )  # type: ignore[arg-type]


RULES = [  # (model inputs, source gives, refused with)
    (TEXT, "text", None),
    (TEXT, "image", "scores text, and the image column 'c' of t holds pictures"),
    (TEXT, "bytes", "pass --image-column c (instead of --text-column) with an image model"),
    (IMAGES, "image", None),
    (IMAGES, "bytes", None),  # an image model decodes a binary column's bytes, as it always has
    (IMAGES, "text", "scores pictures, and the text column 'c' of t holds text; name the column"),
    (TEXT | IMAGES, "text", None),
    (TEXT | IMAGES, "image", None),
    (TEXT | IMAGES, "bytes", None),
    (None, "image", None),  # a plug-in that declares nothing is not checked
    (None, "bytes", None),
]


@pytest.mark.parametrize(("inputs", "kind", "refused"), RULES)
def test_the_rule(inputs: frozenset[str] | None, kind: str, refused: str | None) -> None:
    model = ModelInfo("m", "v1", OUT, 8, inputs=inputs)  # type: ignore[arg-type]
    if refused is None:
        check_model_inputs(model, _given(kind))
        return
    with pytest.raises(ConfigError) as caught:
        check_model_inputs(model, _given(kind))
    assert str(caught.value).startswith("model 'm' ") and refused in str(caught.value), caught.value
    assert "\n" not in str(caught.value)


def test_a_folder_given_to_a_text_model_names_no_column_to_drop() -> None:
    with pytest.raises(ConfigError) as caught:
        check_model_inputs(ModelInfo("m", "v1", OUT, 8, inputs=TEXT), _given("image", None))
    assert "choose an image model" in str(caught.value) and "--image-column" not in str(caught.value)


@pytest.fixture
def media(tmp_path: Path) -> str:
    """A SQLite table of titles (text), pictures (a BLOB), and notes (UTF-8 text stored as a BLOB)."""
    path = tmp_path / "media.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table media (id integer primary key, title text, img blob, note blob)")
        rows = [
            (k, f"title {k}", encoded(picture("RGB", (12, 9), k), "PNG"), f"a note, {k} ✓".encode())
            for k in range(6)
        ]
        conn.executemany("insert into media values (?, ?, ?, ?)", rows)
    conn.close()
    url = f"sqlite:///{path}"
    with Ledger(url) as ledger:
        ledger.ensure()
    return url


def _spec(url: str, model: str, **fields: object) -> RunSpec:
    return flat_spec(source=url, results=url, results_table="scores", table="media", model=model, **fields)  # type: ignore[arg-type]


def _runs(url: str) -> int:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        count = int(conn.execute("select count(*) from shardwise_runs").fetchone()[0])
    conn.close()
    return count


def _refusals(dirs: dict[str, Path]) -> dict[str, tuple[str, dict[str, object], str]]:
    vit, encoder = str(dirs["vit"]), str(dirs["encoder"])
    return {
        "image model, text column": (vit, {"text_column": "title"}, "holds text; name the column"),
        "text model, image column": ("tiny", {"image_column": "img"}, "image column 'img' of "),
        "encoder, image column": (encoder, {"image_column": "img"}, "holds pictures; choose an image model"),
        "text model, BLOB of pictures": ("tiny", {"text_column": "img"}, "(6 PNG); to score pictures pass"),
        "image model, BLOB of text": (vit, {"text_column": "note"}, "text column 'note' of "),
    }


@pytest.mark.parametrize(
    "case",
    [
        "image model, text column",
        "text model, image column",
        "encoder, image column",
        "text model, BLOB of pictures",
        "image model, BLOB of text",
    ],
)
def test_check_run_and_prepare_run_refuse_before_anything_is_written(
    media: str, dirs: dict[str, Path], case: str, pipeline: object
) -> None:
    model, fields, refused = _refusals(dirs)[case]
    spec = _spec(media, model, **fields)
    with pytest.raises(ConfigError, match="scores") as caught:
        check_run(spec, as_is, get_spec, local_workers=True)
    assert refused in str(caught.value), caught.value
    with pytest.raises(ConfigError) as planned:
        pipeline.plan(spec, f"refused-{case}")  # type: ignore[attr-defined]
    assert str(planned.value) == str(caught.value)
    assert _runs(media) == 0


def test_what_a_model_can_take_still_runs(media: str, dirs: dict[str, Path], pipeline: object) -> None:
    clip, vit = str(dirs["clip"]), str(dirs["vit"])
    for model, fields in [
        ("tiny", {"text_column": "title"}),
        ("tiny", {"text_column": "note"}),  # the documented choice: a BLOB of UTF-8 text is text
        (vit, {"image_column": "img"}),
        (vit, {"text_column": "img"}),  # an image model reads a binary column's bytes as pictures
        (clip, {"text_column": "title"}),
        (clip, {"image_column": "img"}),
    ]:
        assert check_run(_spec(media, model, **fields), as_is, get_spec, local_workers=True).idle is None
    _, counts = pipeline.run(_spec(media, "tiny", text_column="note", precision="fp32"), "notes")  # type: ignore[attr-defined]
    assert (counts.rows_out, counts.rows_failed) == (6, 0)
