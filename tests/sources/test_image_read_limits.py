"""Every image read is bounded (issue 34, item 2): a byte cap, a time bound, regular files only, and no
fetch thread left hanging; and an image folder reads only its own folder's regular files."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hostile_refs import PICTURE, fifo_unblocked, no_reader_left, read_all

from shardwise.errors import InputError, SourceError
from shardwise.lineage import value_fingerprint
from shardwise.model.binary_value import BinaryValue
from shardwise.sources import ImageFolderSource
from shardwise.sources.base import SourceRow
from shardwise.sources.images import ImageAccess, ImageColumn
from shardwise.sources.images.capped import read_capped
from shardwise.sources.images.fetch_ahead import Fetch, fetched_in_order

CAP = len(PICTURE)


def test_a_file_over_the_byte_cap_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "fits.png").write_bytes(PICTURE)
    (tmp_path / "big.png").write_bytes(PICTURE + b"!")
    column = ImageColumn("img", access=ImageAccess(roots=(str(tmp_path),), max_bytes=CAP))
    assert column.value(str(tmp_path / "fits.png")).data == PICTURE  # the cap itself is allowed
    big = column.value(str(tmp_path / "big.png"))
    assert big.data is None and value_fingerprint(big) is None
    assert big.error == (
        f"refused: {CAP + 1:,} bytes, over the image read cap of {CAP:,} bytes, so it was not read; "
        "shrink the picture, or raise --image-max-bytes"
    )


class _Endless:
    """A stream at its protocol boundary that never ends (``/dev/zero``, a file still being written)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.given, self._delay_s = 0, delay_s

    def read(self, n: int) -> bytes:
        time.sleep(self._delay_s)
        self.given += n
        return b"\0" * n


def test_a_stream_of_unknown_length_is_read_no_further_than_the_cap() -> None:
    stream = _Endless()
    with pytest.raises(InputError, match=r"^refused: larger than that, over the image read cap of 3,000,000"):
        read_capped(stream.read, ImageAccess(max_bytes=3_000_000))
    assert stream.given == 3_000_001  # one byte past the cap tells it is over; no more is asked for


def test_a_known_size_over_the_cap_reads_nothing() -> None:
    stream = _Endless()
    with pytest.raises(InputError, match="refused: 101 bytes, over the image read cap of 100 bytes"):
        read_capped(stream.read, ImageAccess(max_bytes=100), size=101)
    assert stream.given == 0


def test_a_read_that_drips_past_the_time_bound_is_refused() -> None:
    access = ImageAccess(max_bytes=10 * 2**20, read_timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(InputError, match=r"refused: reading it took over 0\.2 s, the time bound"):
        read_capped(_Endless(delay_s=0.05).read, access)
    assert time.monotonic() - started < 2


def test_a_read_hung_in_its_thread_is_given_up_and_the_rows_go_on() -> None:
    """A read stuck in the kernel (a hung mount) holds a daemon thread, never the rows behind it."""
    release = threading.Event()

    def hung() -> BinaryValue:
        release.wait(30)
        return BinaryValue(b"too late")

    items = [
        (1, BinaryValue(b"inline")),
        (2, Fetch(hung, "/mnt/hung/a.png", 0.3)),
        (3, Fetch(lambda: BinaryValue(b"three"), "/b.png", 0.3)),
    ]
    try:
        started = time.monotonic()
        out = list(fetched_in_order(iter(items), threads=1, name="test-hung"))
        assert time.monotonic() - started < 5
        stuck = [t for t in threading.enumerate() if t.name.startswith("test-hung") and t.is_alive()]
        assert stuck and all(t.daemon for t in stuck)  # left to its read; the process can still exit
    finally:
        release.set()
    assert [k for k, _ in out] == [1, 2, 3]
    assert out[1][1] == BinaryValue(
        None,
        origin="/mnt/hung/a.png",
        error="refused: reading it hung for over 0.3 s, so it was given up; check the storage it is on, "
        "then redrive the run",
    )
    assert out[2][1].data == b"three"  # read by the thread that took the stuck one's place


def test_more_hung_reads_than_threads_fail_the_read() -> None:
    release = threading.Event()
    items = ((i, Fetch(lambda: BinaryValue(b"x") if release.wait(30) else BinaryValue(None), f"/h/{i}", 0.2))
             for i in range(10))  # fmt: skip
    try:
        with pytest.raises(SourceError, match=r"^3 image reads hung for over 0\.2 s each .* not answering"):
            list(fetched_in_order(items, threads=2, name="test-all-hung"))
    finally:
        release.set()


def test_a_fifo_never_blocks_a_fetch(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    column = ImageColumn("img", access=ImageAccess(roots=(str(tmp_path),)))
    with fifo_unblocked(fifo):
        rows = iter([SourceRow(1, str(fifo)), SourceRow(2, fifo.as_uri())])
        reading = threading.Thread(target=lambda: out.extend(column.rows(rows)), daemon=True)
        out: list[SourceRow] = []
        reading.start()
        reading.join(20)
        assert not reading.is_alive(), "a fetch thread blocked opening the FIFO"
    assert [r.value.error for r in out] == [
        "refused: not a regular file (a FIFO); only regular files are read"
    ] * 2
    assert no_reader_left(fifo)


# An image folder: its own folder is its root; what lies in it must still be a regular file under it.


def test_an_image_folder_refuses_a_symlink_out_of_it_and_a_fifo(tmp_path: Path) -> None:
    folder, outside = tmp_path / "photos", tmp_path / "private"
    folder.mkdir()
    outside.mkdir()
    (folder / "a.png").write_bytes(PICTURE)
    (outside / "secret.png").write_bytes(PICTURE)
    (folder / "leak.png").symlink_to(outside / "secret.png")
    os.mkfifo(folder / "pipe.png")
    (folder / "big.png").write_bytes(PICTURE + b"!")
    with (
        fifo_unblocked(folder / "pipe.png"),
        ImageFolderSource(str(folder), access=ImageAccess(max_bytes=CAP)) as src,
    ):
        values = read_all(src)
    assert values["a.png"] == BinaryValue(PICTURE, origin=str(folder / "a.png"))
    assert str(values["leak.png"].error).startswith(
        f"refused: the path is outside the image roots ({folder.resolve()}) once symlinks and '..' are "
    )
    assert values["pipe.png"].error == "refused: not a regular file (a FIFO); only regular files are read"
    assert str(values["big.png"].error).startswith(f"refused: {CAP + 1:,} bytes, over the image read cap")
    assert all(values[k].data is None for k in ("leak.png", "pipe.png", "big.png"))

    declared = ImageAccess(roots=(str(outside),))  # the operator allows where the symlink leads
    with fifo_unblocked(folder / "pipe.png"), ImageFolderSource(str(folder), access=declared) as src:
        assert read_all(src)["leak.png"].data == PICTURE


@pytest.mark.s3
def test_s3_objects_over_the_cap_are_refused(client: Any, bucket: str) -> None:
    """By ``Content-Length`` for a reference, by the listed size in an image folder: no body is read."""
    client.put_object(Bucket=bucket, Key="photos/fits.png", Body=PICTURE)
    client.put_object(Bucket=bucket, Key="photos/big.png", Body=PICTURE + b"!")
    access = ImageAccess(max_bytes=CAP)
    column = ImageColumn("img", access=ImageAccess(buckets=(bucket,), max_bytes=CAP), s3_client=client)
    try:
        assert column.value(f"s3://{bucket}/photos/fits.png").data == PICTURE
        big = column.value(f"s3://{bucket}/photos/big.png")
    finally:
        column.close()
    assert big.data is None and str(big.error).startswith(
        f"refused: {CAP + 1:,} bytes, over the image read cap"
    )
    with ImageFolderSource(f"s3://{bucket}/photos/", s3_client=client, access=access) as source:
        values = read_all(source)
    assert values["fits.png"].data == PICTURE
    assert values["big.png"].data is None
    assert str(values["big.png"].error).startswith(f"refused: {CAP + 1:,} bytes, over the image read cap")
