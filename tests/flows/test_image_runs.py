"""``shardwise run --image-column``: pictures in a PostgreSQL bytea column and behind s3:// references in
Parquet on S3, scored by an image classifier and by CLIP, agreeing with transformers; bad pictures are dead
letters with their reasons, the rest scored exactly once; only-new then scores nothing."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
import torch
from flow_data import execute
from image_builders import (
    LABELS,
    reference_picture,
    sample_photos,
    tiny_clip,
    tiny_vit_classifier,
    varied_pictures,
)

from shardwise.flows.cli import main

pytestmark = pytest.mark.usefixtures("prefect_harness")

BAD = {
    900: b"",
    901: b"\x89PNG\r\n\x1a\n" + b"garbage" * 20,
    902: b"plain text, not a picture",
}


def _pictures() -> dict[int, bytes]:
    good = [*varied_pictures(), *sample_photos()]
    truncated = good[-1][: len(good[-1]) // 2]
    return {**dict(enumerate(good)), **BAD, 903: truncated}


def _expected_probabilities(model_dir: Path, pictures: list[bytes]) -> np.ndarray:
    from transformers import AutoImageProcessor, AutoModelForImageClassification

    processor = AutoImageProcessor.from_pretrained(model_dir, local_files_only=True)
    net = AutoModelForImageClassification.from_pretrained(model_dir, local_files_only=True).eval()
    images = [reference_picture(p) for p in pictures]
    with torch.inference_mode():
        return net(**processor(images=images, return_tensors="pt")).logits.softmax(-1).numpy()


@pytest.mark.postgres
def test_a_bytea_table_scored_by_an_image_classifier(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny_vit_classifier(tmp_path / "vit")
    pictures = _pictures()
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table photos (id bigint primary key, img bytea)"))
        conn.execute(
            sa.text("insert into photos values (:id, :img)"),
            [{"id": k, "img": v} for k, v in pictures.items()],
        )
        conn.execute(sa.text("insert into photos values (904, NULL)"))
    engine.dispose()
    argv = ["run", "--source", pg_url, "--table", "photos", "--image-column", "img", "--model", str(model)]
    argv += ["--precision", "fp32", "--shards", "2", "--results-table", "photo_labels"]
    assert main(argv) == 0, capsys.readouterr().err
    good = sorted(k for k in pictures if k < 900)
    assert f"{len(good)} rows scored ({len(good)} new" in capsys.readouterr().out

    rows = execute(pg_url, "select source_key, label, probabilities from photo_labels order by source_key")
    assert [int(r[0]) for r in rows] == good
    expected = _expected_probabilities(model, [pictures[k] for k in good])
    np.testing.assert_allclose(np.array([r[2] for r in rows], dtype=np.float32), expected, atol=1e-5)
    assert [r[1] for r in rows] == [LABELS[i] for i in expected.argmax(1)]

    letters = dict(execute(pg_url, "select source_key, message from shardwise_errors"))
    assert set(letters) == {"900", "901", "902", "903", "904"}
    assert all(letters[k] for k in letters), letters  # each with its reason
    assert "NULL" in letters["904"]

    assert main([*argv, "--only-new"]) == 0
    out = capsys.readouterr().out
    assert "0 rows scored" in out, out


@pytest.mark.s3
def test_s3_references_in_parquet_on_s3_scored_by_clip(
    s3_env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3
    import polars as pl

    model = tiny_clip(tmp_path / "clip")
    client = boto3.client("s3")
    bucket = f"sw-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    pictures = _pictures()
    refs = {}
    for key, data in pictures.items():
        client.put_object(Bucket=bucket, Key=f"pictures/{key}.bin", Body=data)
        refs[key] = f"s3://{bucket}/pictures/{key}.bin"
    refs[905] = f"s3://{bucket}/pictures/missing.png"
    buffer = io.BytesIO()
    pl.DataFrame({"id": list(refs), "img": list(refs.values())}).write_parquet(buffer)
    client.put_object(Bucket=bucket, Key="table/part-0.parquet", Body=buffer.getvalue())
    results = f"sqlite:///{tmp_path / 'results.db'}"
    argv = ["run", "--source", f"s3://{bucket}/table/", "--image-column", "img", "--model", str(model)]
    argv += ["--precision", "fp32", "--results", results, "--results-table", "photo_vectors"]
    assert main(argv) == 0, capsys.readouterr().err
    good = sorted(k for k in pictures if k < 900)
    assert f"{len(good)} rows scored" in capsys.readouterr().out

    from transformers import CLIPModel, CLIPProcessor

    processor = CLIPProcessor.from_pretrained(model, local_files_only=True)
    net = CLIPModel.from_pretrained(model, local_files_only=True).eval()
    with torch.inference_mode():
        features = net.get_image_features(
            **processor(images=[reference_picture(pictures[k]) for k in good], return_tensors="pt")
        )
    tensor = features if isinstance(features, torch.Tensor) else features.pooler_output  # by version
    expected = torch.nn.functional.normalize(tensor, dim=-1).numpy()
    rows = execute(results, "select source_key, embedding from photo_vectors order by source_key")
    assert [int(r[0]) for r in rows] == good
    got = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    letters = dict(execute(results, "select source_key, message from shardwise_errors"))
    assert set(letters) == {"900", "901", "902", "903", "905"}
    assert "no such object" in letters["905"]


@pytest.mark.slow
def test_an_image_run_killed_mid_shard_resumes_exactly(tmp_path: Path) -> None:
    import os
    import re
    import signal
    import subprocess
    import sys

    from image_builders import encoded, picture

    model = tiny_vit_classifier(tmp_path / "vit")
    source = f"sqlite:///{tmp_path / 'photos.db'}"
    rows = 3000  # three chunks of 1024 (an image model's chunk)
    engine = sa.create_engine(source)
    with engine.begin() as conn:
        conn.execute(sa.text("create table photos (id integer primary key, img blob)"))
        blobs = [
            {"id": i, "img": encoded(picture("RGB", (24 + i % 17, 20 + i % 13), seed=i), "PNG")}
            for i in range(rows)
        ]
        conn.execute(sa.text("insert into photos values (:id, :img)"), blobs)
    engine.dispose()
    common = ["run", "--source", source, "--table", "photos", "--image-column", "img", "--model", str(model)]
    common += ["--precision", "fp32", "--threads", "1", "--shards", "1"]
    counted = [
        sys.executable,
        str(Path(__file__).with_name("counted_cli.py")),
        str(tmp_path / "counts"),
        "600",
    ]
    killed = [*common, "--results-table", "killed"]
    proc = subprocess.Popen(
        [*counted, *killed, "--lease-s", "2", "--progress", "lines", "--progress-every", "0.2"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        done = re.search(r"progress: 0/1 shard, ([\d,]+)/", line)
        if done and int(done.group(1).replace(",", "")) > 1024:  # past the first committed chunk
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-shard"
    ((run_id,),) = execute(source, "select run_id from shardwise_runs where status = 'running'")
    import time

    time.sleep(2)  # its lease runs out: a resume may take it
    cli = [sys.executable, "-m", "shardwise.flows.cli"]
    resumed = subprocess.run(
        [*cli, *killed, "--resume", run_id, "--progress", "none"], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    clean = subprocess.run(
        [*cli, *common, "--results-table", "clean", "--progress", "none"], capture_output=True
    )
    assert clean.returncode == 0
    query = "select source_key, label, probabilities from {} order by source_key"
    got, want = (execute(source, query.format(t)) for t in ("killed", "clean"))
    assert len(got) == rows and got == want


def test_a_folder_of_pictures_is_a_source_and_only_new_scores_the_new_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny_vit_classifier(tmp_path / "vit")
    folder = tmp_path / "uploads"
    folder.mkdir()
    pictures = varied_pictures()
    for i, data in enumerate(pictures):
        (folder / f"{i:03d}.png").write_bytes(data)
    (folder / "broken.jpg").write_bytes(b"not a picture")
    results = f"sqlite:///{tmp_path / 'results.db'}"
    argv = ["run", "--source", str(folder), "--model", str(model), "--precision", "fp32"]
    argv += ["--results", results, "--results-table", "labels"]
    assert main(argv) == 0, capsys.readouterr().err
    assert f"{len(pictures)} rows scored ({len(pictures)} new" in capsys.readouterr().out
    keys = [r[0] for r in execute(results, "select source_key from labels order by source_key")]
    assert keys == [f"{i:03d}.png" for i in range(len(pictures))]
    assert execute(results, "select source_key from shardwise_errors") == [("broken.jpg",)]

    (folder / "new.png").write_bytes(pictures[0])
    assert main([*argv, "--only-new"]) == 0
    assert "1 row scored (1 new" in capsys.readouterr().out


@pytest.mark.slow
def test_a_table_of_hostile_references_ends_in_time_with_a_dead_letter_each(tmp_path: Path) -> None:
    """``shardwise run`` over /etc/shadow, /proc/self/environ, ``..``, symlinks out of the root, a FIFO and
    another bucket (issue 34): the command ends well within 70 s (a FIFO once held it for ever), each
    such row is a dead letter holding only its reason, and only the picture under the root is scored."""
    import subprocess
    import sys

    from hostile_refs import fifo_unblocked, hostile_refs, no_reader_left
    from image_builders import encoded, picture

    hostile = hostile_refs(tmp_path / "files", encoded(picture("RGB", (24, 20)), "PNG"))
    source = f"sqlite:///{tmp_path / 'photos.db'}"
    refs = {**hostile.good, **hostile.refused}
    engine = sa.create_engine(source)
    with engine.begin() as conn:
        conn.execute(sa.text("create table photos (id integer primary key, img text)"))
        conn.execute(
            sa.text("insert into photos values (:k, :r)"), [{"k": k, "r": r} for k, r in refs.items()]
        )
    engine.dispose()
    model = tiny_vit_classifier(tmp_path / "vit")
    argv = [sys.executable, "-m", "shardwise.flows.cli", "run", "--source", source, "--table", "photos"]
    argv += ["--image-column", "img", "--image-root", str(hostile.root), "--model", str(model)]
    argv += ["--precision", "fp32", "--results-table", "labels", "--progress", "none"]
    with fifo_unblocked(hostile.fifo):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=70)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(hostile.good)} rows scored" in done.stdout, done.stdout
    assert [int(k) for (k,) in execute(source, "select source_key from labels")] == sorted(hostile.good)
    letters = execute(source, "select source_key, message, input_fingerprint from shardwise_errors")
    assert sorted(int(k) for k, _, _ in letters) == sorted(hostile.refused)
    assert all("refused: " in message and fingerprint is None for _, message, fingerprint in letters), letters
    assert no_reader_left(hostile.fifo)
