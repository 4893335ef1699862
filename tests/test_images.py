"""shardwise.model.images: a picture too large gets the one message the docs quote, however large it is.

Pillow's guard (``Image.MAX_IMAGE_PIXELS``, set to ``PILLOW_LIMIT``) warns of
a picture over it and refuses one over twice it inside ``Image.open``, in its
own words; ``decode`` reads the header without that check, compares the size
with ``max_pixels`` itself before decoding a pixel, and leaves the guard on
for the rest of the process. The pictures are real PNG and GIF files whose
headers claim huge sizes (a few dozen bytes each).
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

import pytest

pytest.importorskip("PIL")

from image_builders import encoded, gif_header, picture, png_header
from PIL import Image

from shardwise.errors import InputError
from shardwise.model.images import DEFAULT_MAX_PIXELS, PILLOW_LIMIT, decode

DOCS = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "images.md"

# Over max_pixels only; over Pillow's guard (it would warn); over twice it (it would refuse); a GIF.
HUGE = {
    "png over max_pixels": (png_header(10_000, 10_000), (10_000, 10_000)),
    "png over the guard": (png_header(20_000, 20_000), (20_000, 20_000)),
    "png over twice the guard": (png_header(30_000, 30_000), (30_000, 30_000)),
    "png 2^31-1 wide": (png_header(2**31 - 1, 1), (2**31 - 1, 1)),
    "gif 60000 square": (gif_header(60_000, 60_000), (60_000, 60_000)),
}


def _documented(row: str) -> re.Pattern[str]:
    """The messages the images page's dead-letter table quotes in the row starting ``row``, as a pattern:
    W, H, N and M stand for numbers, the rest is word for word."""
    for line in DOCS.read_text().splitlines():
        if line.startswith(f"| {row}"):
            quoted = re.findall(r"`([^`]*)`", line.split("|")[2])
            assert quoted, f"the row {row!r} of {DOCS} quotes no message"
            return re.compile("|".join(_pattern(q) for q in quoted))
    raise AssertionError(f"no row {row!r} in {DOCS}")


def _pattern(quoted: str) -> str:
    parts = re.split(r"(?<![A-Za-wyz])([WHNM])(?![A-Za-wyz])", quoted)  # "WxH": two numbers
    return "".join(r"[\d,]+" if i % 2 else re.escape(p) for i, p in enumerate(parts))


def _refusal(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> str:
    """decode's InputError for ``data``, checking that Pillow printed no warning of its own on the way."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InputError) as refused:
            decode(data, max_pixels)
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]
    return str(refused.value)


@pytest.mark.parametrize("name", list(HUGE))
def test_a_picture_of_any_size_over_the_limit_gets_the_documented_message(name: str) -> None:
    data, (width, height) = HUGE[name]
    message = _refusal(data)
    assert message == (
        f"image is {width}x{height} = {width * height:,} pixels, over the limit of {DEFAULT_MAX_PIXELS:,}; "
        "resize it, or raise the model's max_pixels"
    )
    assert _documented("is larger than `max_pixels`").match(message), message


def test_the_small_limit_of_a_spec_is_named_and_a_picture_within_it_decodes() -> None:
    small = encoded(picture("RGB", (30, 20)), "PNG")
    assert decode(small, max_pixels=600).size == (30, 20)
    message = _refusal(small, max_pixels=599)
    assert message.startswith("image is 30x20 = 600 pixels, over the limit of 599;")
    assert _documented("is larger than `max_pixels`").match(message)


def test_a_gif_frame_reaching_past_its_screen_is_refused_in_the_same_words() -> None:
    """GIF's own reader runs Pillow's guard on the frame's extent while reading the header: the size
    is then known only as over twice the guard, and the message keeps the documented shape."""
    message = _refusal(gif_header(1, 1, frame=(30_000, 30_000)))
    assert message == (
        f"image is over {2 * PILLOW_LIMIT:,} pixels, over the limit of {DEFAULT_MAX_PIXELS:,}; "
        "resize it, or raise the model's max_pixels"
    )
    assert _documented("is larger than `max_pixels`").match(message)


def test_pillows_guard_stays_on_for_the_rest_of_the_process() -> None:
    for data, _ in HUGE.values():
        with pytest.raises(InputError):
            decode(data)
    assert Image.MAX_IMAGE_PIXELS == PILLOW_LIMIT
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(png_header(30_000, 30_000)))


def test_what_is_not_a_picture_is_still_told_apart_from_a_damaged_one() -> None:
    png = encoded(picture("RGB", (8, 8)), "PNG")
    assert "are not an image Pillow can read" in _refusal(b"id,text\n1,hello\n")
    assert "the file is damaged" in _refusal(png[: len(png) // 2])
    assert decode(encoded(picture("P", (9, 7)), "GIF")).size == (9, 7)
