"""The reservation a decode asks for (decoded_bytes) holds what it really allocates, in every
pixel mode Pillow opens, for the indexer's preprocessing and the API's thumbnails: measured
with the pixels of the live Pillow images plus tracemalloc (tests/support/pixelmemory.py),
deterministic, never the process's RSS. And the reductions shrink before they convert: a
palette PNG is never made RGB at full size."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from PIL import Image

from core.embedding.budget import Reserve
from core.embedding.images import ImageLimits, decoded_bytes, prepare_image
from core.embedding.manifest import ImagePreprocessing
from query_api.images.photos import make_thumbnail
from tests.support.images import encode, photo
from tests.support.pixelmemory import PixelLedger

SPEC = ImagePreprocessing(size=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
THUMBNAIL = 320
LIMITS = ImageLimits()


def _palette(image: Image.Image, transparent: bool) -> Image.Image:
    quantized = image.convert("RGB").quantize(64)
    if transparent:
        quantized.info["transparency"] = 0
    return quantized


def _sixteen(image: Image.Image) -> Image.Image:
    grey = np.asarray(image.convert("L"), dtype=np.uint16) * 257
    sixteen = Image.fromarray(grey)
    assert sixteen.mode == "I;16"
    return sixteen


def _ints(image: Image.Image) -> Image.Image:
    return Image.fromarray(np.asarray(image.convert("L"), dtype=np.int32) * 200, mode="I")


def _floats(image: Image.Image) -> Image.Image:
    return Image.fromarray(np.asarray(image.convert("L"), dtype=np.float32) / 255, mode="F")


# mode -> (how a real photo becomes an image of it, the format that keeps the mode)
MODES: dict[str, tuple[Callable[[Image.Image], Image.Image], str]] = {
    "1": (lambda im: im.convert("1"), "PNG"),
    "L": (lambda im: im.convert("L"), "PNG"),
    "LA": (lambda im: im.convert("LA"), "PNG"),
    "P": (lambda im: _palette(im, False), "PNG"),
    "P+transparency": (lambda im: _palette(im, True), "PNG"),
    "RGB": (lambda im: im.convert("RGB"), "PNG"),
    "RGBA": (lambda im: im.convert("RGBA"), "PNG"),
    "I;16": (_sixteen, "PNG"),
    "I": (_ints, "TIFF"),
    "F": (_floats, "TIFF"),
    "CMYK": (lambda im: im.convert("CMYK"), "TIFF"),
    "CMYK JPEG": (lambda im: im.convert("CMYK"), "JPEG"),
}
# Shrunk by 2 (shorter side 1000), by 1 (a small photo) and a strip far from square.
SIZES = [(1500, 1000), (640, 480), (4000, 120)]


def _encoded(mode: str, size: tuple[int, int]) -> bytes:
    make, fmt = MODES[mode]
    image = make(photo("astronaut").convert("RGB").resize(size))
    data = encode(image, fmt)
    assert Image.open(io.BytesIO(data)).mode == mode.split()[0].split("+")[0]
    return data


def _measured(run: Callable[[Reserve], object]) -> tuple[list[int], int]:
    asked: list[int] = []

    @contextmanager
    def reserve(amount: int) -> Iterator[None]:
        asked.append(amount)
        yield

    with PixelLedger() as ledger:
        run(reserve)
    return asked, ledger.peak


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode", list(MODES))
def test_the_reservation_holds_what_preparing_a_photo_allocates(
    mode: str, size: tuple[int, int]
) -> None:
    data = _encoded(mode, size)
    asked, peak = _measured(lambda reserve: prepare_image(data, SPEC, reserve=reserve))
    assert len(asked) == 1 and peak > 0
    assert asked[0] >= peak, f"{mode} {size}: reserved {asked[0]}, allocated {peak}"


@pytest.mark.parametrize("mode", list(MODES))
def test_the_reservation_holds_what_a_thumbnail_allocates(mode: str) -> None:
    data = _encoded(mode, (1500, 1000))
    asked, peak = _measured(lambda reserve: make_thumbnail(data, THUMBNAIL, LIMITS, reserve))
    assert len(asked) == 1
    assert asked[0] >= peak, f"{mode}: reserved {asked[0]}, allocated {peak}"


@pytest.mark.parametrize("transparent", [False, True], ids=["opaque", "transparent"])
def test_a_palette_photo_is_shrunk_before_it_becomes_rgb(transparent: bool) -> None:
    """F4's thumbnails of 120-megapixel palette PNGs: never an RGB copy at full size (which
    alone is four times the palette image)."""
    size = (3000, 3000)
    data = encode(_palette(photo("coffee").convert("RGB").resize(size), transparent), "PNG")
    asked, peak = _measured(lambda reserve: prepare_image(data, SPEC, reserve=reserve))
    pixels = size[0] * size[1]
    assert peak < 2 * pixels  # the palette image (1 byte a pixel) and small copies only
    assert asked == [decoded_bytes(size, "P", SPEC.size, "PNG")] and asked[0] >= peak
