"""``--image-root``, ``--image-bucket``, ``--image-max-bytes`` and ``SHARDWISE_IMAGE_ROOTS`` /
``SHARDWISE_IMAGE_BUCKETS`` (issue 34, item 1): they reach the run spec as one ImageAccess, and a bad
value is one line, exit 2, before anything runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from cli_helpers import ledger_runs, one_line

from shardwise.flows.cli import main
from shardwise.flows.cli_options import SOURCE_OPTIONS, add_param_options, score_params
from shardwise.flows.params import ScoreParams
from shardwise.sources.images import ImageAccess


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_param_options(parser, SOURCE_OPTIONS)
    return parser.parse_args(
        ["--source", "sqlite:///x.db", "--table", "docs", "--image-column", "img", *argv]
    )


def test_the_options_and_the_environment_become_one_image_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("typed", "exported"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHARDWISE_IMAGE_ROOTS", f":{tmp_path / 'exported'}:")  # empty entries are no root
    monkeypatch.setenv("SHARDWISE_IMAGE_BUCKETS", "exported-bucket")
    args = _parsed("--image-root", "typed", "--image-bucket", "typed-bucket", "--image-max-bytes", "1000")
    params = score_params(args)
    assert params.source.image_roots == [str(tmp_path / "typed")]  # made absolute where it was typed
    assert params.to_spec().image_access == ImageAccess(
        roots=(str(tmp_path / "typed"), str(tmp_path / "exported")),
        buckets=("typed-bucket", "exported-bucket"),
        max_bytes=1000,
    )


def test_by_default_no_root_no_bucket_and_64_mib() -> None:
    assert score_params(_parsed()).to_spec().image_access == ImageAccess((), (), 64 * 2**20)


def test_roots_are_looked_for_only_where_the_shards_run() -> None:
    """A cluster elsewhere has its own disks: a root this host lacks is theirs to have."""
    source = {
        "location": "sqlite:///x.db",
        "image_column": "img",
        "image_roots": ["/mnt/pictures-on-the-workers"],
    }
    remote = ScoreParams.model_validate(
        {"source": source, "fanout": {"runner": "dask", "address": "tcp://w:8786"}}
    )
    assert remote.image_access().roots == ("/mnt/pictures-on-the-workers",)
    with pytest.raises(ValueError, match="does not exist on this host"):
        ScoreParams.model_validate({"source": source}).image_access()


def _bad(tmp_path: Path) -> list[tuple[list[str], dict[str, str], str]]:
    (tmp_path / "a-file").write_text("not a folder")
    missing, a_file = tmp_path / "missing", tmp_path / "a-file"
    return [
        (
            ["--image-root", str(missing)],
            {},
            f"image root '{missing}' (--image-root) does not exist on this host",
        ),
        (
            ["--image-root", str(a_file)],
            {},
            f"image root '{a_file}' (--image-root) is not a folder on this host",
        ),
        (["--image-root", "/proc/self"], {}, "image root '/proc/self' is in /proc, /sys, /dev"),
        (["--image-root", " "], {}, "--image-root ' ': an image root must be a folder's path"),
        (["--image-bucket", "s3://photos"], {}, "image bucket 's3://photos' is not an S3 bucket name"),
        (["--image-max-bytes", "0"], {}, "--image-max-bytes 0: Input should be greater than or equal to 1"),
        ([], {"SHARDWISE_IMAGE_ROOTS": "photos"}, "SHARDWISE_IMAGE_ROOTS holds 'photos', a relative path"),
        ([], {"SHARDWISE_IMAGE_ROOTS": str(missing)}, "(SHARDWISE_IMAGE_ROOTS) does not exist on this host"),
        ([], {"SHARDWISE_IMAGE_BUCKETS": "Bad_Bucket"}, "image bucket 'Bad_Bucket' is not an S3 bucket name"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_a_bad_image_option_is_one_line_exit_2_and_no_run(
    case: int, docs: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    extra, environment, message = _bad(tmp_path)[case]
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    image = ["--image-column", "img"]  # the options apply to an image column only
    code = main(["run", "--source", docs, "--table", "docs", "--model", "tiny", *image, *extra])
    err = one_line(capfd)
    assert code == 2, err
    assert err.startswith("shardwise: error: ") and message in err, err
    assert ledger_runs(docs) == 0
