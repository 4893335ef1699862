"""A model that cannot take the input is refused at the command line (issue 39, item 7): one line naming
the model, the column and the fix, exit 2, no run in the ledger and no flow run; before, every row was a
dead letter of a run that exited 0. A model that can take it still runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_helpers import flow_runs, ledger_runs, one_line
from flow_data import execute
from image_builders import encoded, picture, tiny_vit_classifier

from shardwise.flows.cli import main
from shardwise.models.plugins.mobilenet import weights_file
from shardwise.results import Ledger

pytestmark = pytest.mark.usefixtures("prefect_harness")

PICTURES = 6


@pytest.fixture
def media(tmp_path: Path) -> str:
    """SQLite ``media``: a title (text), a picture (a BLOB) and a note (UTF-8 text in a BLOB) per row;
    an empty ledger beside them."""
    path = tmp_path / "media.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table media (id integer primary key, title text, img blob, note blob)")
        rows = [
            (k, f"title {k}", encoded(picture("RGB", (12, 9), k), "PNG"), f"a note, {k} ✓".encode())
            for k in range(PICTURES)
        ]
        conn.executemany("insert into media values (?, ?, ?, ?)", rows)
    conn.close()
    url = f"sqlite:///{path}"
    with Ledger(url) as ledger:
        ledger.ensure()
    return url


@pytest.fixture(scope="module")
def image_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``mobilenet-v2`` when its weights are installed, else a tiny ViT classifier directory."""
    if weights_file() is not None:
        return "mobilenet-v2"
    return str(tiny_vit_classifier(tmp_path_factory.mktemp("vit") / "vit"))


def _refused(argv: list[str], ledger: str, capfd: pytest.CaptureFixture[str]) -> str:
    before = flow_runs()
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith("shardwise: error: model "), err
    assert ledger_runs(ledger) == 0 and flow_runs() == before, "a refused command started a run"
    return err


def _run(media: str, *extra: str) -> list[str]:
    return ["run", "--source", media, "--table", "media", *extra]


def test_an_image_model_over_a_text_column_is_refused(
    media: str, image_model: str, capfd: pytest.CaptureFixture[str]
) -> None:
    err = _refused(_run(media, "--model", image_model, "--text-column", "title"), media, capfd)
    assert f"model {image_model!r} scores pictures, and the text column 'title' of " in err, err
    assert "holds text; name the column that holds the pictures" in err and "--image-column COLUMN" in err


def test_a_text_model_over_an_image_column_is_refused(media: str, capfd: pytest.CaptureFixture[str]) -> None:
    err = _refused(_run(media, "--model", "tiny", "--image-column", "img"), media, capfd)
    assert "model 'tiny' scores text, and the image column 'img' of " in err, err
    assert "choose an image model" in err and "drop --image-column" in err, err


def test_a_text_model_over_a_binary_column_of_pictures_is_refused(
    media: str, capfd: pytest.CaptureFixture[str]
) -> None:
    err = _refused(_run(media, "--model", "tiny", "--text-column", "img"), media, capfd)
    assert "model 'tiny' scores text, and the text column 'img' of " in err, err
    assert (
        f"is a BLOB column, and none of the {PICTURES} values sampled is UTF-8 text ({PICTURES} PNG)" in err
    )
    assert "pass --image-column img (instead of --text-column) with an image model" in err, err


def test_a_text_model_over_a_folder_of_images_is_refused(
    media: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.png").write_bytes(encoded(picture("RGB", (12, 9)), "PNG"))
    argv = ["run", "--source", str(folder), "--model", "tiny", "--results", media]
    err = _refused(argv, media, capfd)
    assert f"model 'tiny' scores text, and the image folder {str(folder)!r} holds pictures" in err, err


def test_the_plan_command_refuses_what_the_run_would(
    media: str, image_model: str, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--source", media, "--table", "media", "--model", image_model, "--text-column", "title"]
    assert "holds text; name the column that holds the pictures" in _refused(argv, media, capfd)


def test_a_text_model_over_utf8_text_in_a_blob_still_runs(
    media: str, capfd: pytest.CaptureFixture[str]
) -> None:
    argv = _run(media, "--model", "tiny", "--text-column", "note", "--results-table", "notes")
    code = main(argv)
    assert code == 0, capfd.readouterr().err
    assert execute(media, "select count(*) from notes") == [(PICTURES,)]
    assert execute(media, "select count(*) from shardwise_errors") == [(0,)]
