"""Image bytes -> the uint8 pixels of the image encoder, as open_clip's eval transform does."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from PIL import Image, UnidentifiedImageError

from core.embedding.arrays import Pixels
from core.embedding.attributes import visual_attributes
from core.embedding.budget import Reserve as Reserve
from core.embedding.errors import ImageTooLarge, InvalidImage
from core.embedding.manifest import ImagePreprocessing
from core.payload import PhotoPayload
from core.settings import ImageSettings

T = TypeVar("T")

_RESAMPLE = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")
# Bytes Pillow stores per pixel (its Storage.c): 1 for "1", "L" and "P", 2 for 16-bit grey,
# 4 for every other mode: RGB is stored as RGBX, LA and PA as four bands too.
_ONE_BYTE = ("1", "L", "P")
# Modes Image.reduce() shrinks as they are, with no full-size copy. It refuses "P", "1" and
# 16-bit grey, reduces LA and RGBA through a full-size premultiplied copy, and would average
# the palette indices of "PA": those are shrunk band by band (_shrink_in_bands).
_REDUCE_AS_IS = ("L", "RGB", "RGBX", "I", "F", "CMYK", "YCbCr", "LAB", "HSV")
# A decode is shrunk by whole factors while the shorter side keeps twice what the resize needs,
# as Pillow's own `reducing_gap=2` does: the resample from there is as good as from full size.
_REDUCING_GAP = 2
# Pixels of the source converted at once when it cannot be reduced as it is: ~1 MB a copy.
_BAND_PIXELS = 1 << 18
# Bytes per band pixel held at once while a band is converted: its crop (<= 4), its RGB or
# RGBA conversion (4), alpha composited over white (3 more RGBA copies), or the integer and
# float modes' numpy copies (asarray, scaled, clipped: 3 x 4, then 1): 28 bounds them all.
_BAND_BYTES = 28
# Copies of the shrunk image (4 bytes a pixel) held at once after it: converted to RGB (alpha
# over white, or numpy's scaled copies of an integer image), turned upright, then resized.
_SMALL_COPIES = 6
# Decoders' own buffers: a few rows of up to 8 bytes a pixel (16-bit RGBA), zlib's window.
_ROW_BYTES = 32
_DECODER_BYTES = 1 << 20
# The resize scales the shorter side to `size`: a 1x60000 strip would become 224x13 million
# pixels (9 GB) only for its centre to be kept. Past this ratio the centre is cut out first.
_MAX_RATIO = 8
_TURN = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# The turns of EXIF orientations 5 to 8: the upright image's width is the stored height.
_SWAPS = frozenset({_TURN[5], _TURN[6], _TURN[7], _TURN[8]})


@dataclass(frozen=True)
class ImageLimits:
    """Refuse files or pixel counts above these (decompression bombs, accidental RAW scans)."""

    max_pixels: int = 120_000_000
    max_bytes: int = 50 * 1024 * 1024

    @classmethod
    def of_stored(cls, images: ImageSettings) -> ImageLimits:
        """The limits of stored photos (the indexer's, and the API's thumbnails)."""
        return cls(images.max_pixels, images.max_bytes)


def bytes_per_pixel(mode: str) -> int:
    if mode in _ONE_BYTE:
        return 1
    return 2 if mode in _SIXTEEN_BIT else 4


def decoded_bytes(
    size: tuple[int, int], mode: str, min_size: int, image_format: str | None = None
) -> int:
    """What decoding an image of this size and mode holds at its peak, estimated from its
    header, for every mode Pillow opens: the decoded pixels (and libtiff's strip of them), the
    RGB image they shrink into, and the larger of a band's conversion and the shrunk image's
    own copies (converted, turned, resized: `min_size` bounds an enlarged one)."""
    width, height = size
    pixels = width * height
    source = pixels * bytes_per_pixel(mode)
    if image_format == "TIFF":
        source *= 2  # libtiff decodes a strip (up to the whole image) into a buffer first
    factor = _reduce_factor(size, min_size)
    small = -(-width // factor) * -(-height // factor)
    band = width * min(height, _band_rows(width, factor))
    finish = small * 4 * _SMALL_COPIES + 2 * 4 * _MAX_RATIO * max(min_size, 1) ** 2
    work = max(band * _BAND_BYTES, finish)
    return source + small * 4 + work + width * _ROW_BYTES + _DECODER_BYTES


def _reduce_factor(size: tuple[int, int], min_size: int) -> int:
    return max(1, min(size) // (_REDUCING_GAP * max(min_size, 1)))


def _band_rows(width: int, factor: int) -> int:
    """Rows of a band: whole blocks of the reduction, so bands reduce as the whole would."""
    return factor * max(1, _BAND_PIXELS // (width * factor))


def _open(data: bytes, limits: ImageLimits) -> Image.Image:
    if not data:
        raise InvalidImage("empty file (zero bytes)")
    if len(data) > limits.max_bytes:
        raise ImageTooLarge(f"file is {len(data)} bytes, the limit is {limits.max_bytes}")
    try:
        with warnings.catch_warnings():
            # Pillow warns above its own pixel limit; ours is checked below instead.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise InvalidImage("not an image, or a format that cannot be read") from None
    except Image.DecompressionBombError as exc:
        # Pillow refuses twice its own limit while reading the header, before our check.
        raise ImageTooLarge(
            f"too many pixels for the limit of {limits.max_pixels}: {exc}"
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InvalidImage(f"unreadable image header: {exc}") from None
    width, height = image.size
    if width * height > limits.max_pixels:
        raise ImageTooLarge(
            f"{width}x{height} is {width * height} pixels, the limit is {limits.max_pixels}"
        )
    if width < 1 or height < 1:
        raise InvalidImage(f"image has no pixels ({width}x{height})")
    return image


def _decode_then(
    data: bytes,
    min_size: int,
    limits: ImageLimits | None,
    reserve: Reserve | None,
    finish: Callable[[Image.Image, tuple[int, int]], T],
) -> T:
    """Decode to an upright RGB image whose shorter side is still >= min_size, and `finish` it
    within the same reservation (its copies are in the estimate), given the original's
    upright size (read from the header, before draft mode shrinks it)."""
    image = _open(data, limits or ImageLimits())
    width, height = image.size
    if image.format == "JPEG":
        image.draft(image.mode, (min_size, min_size))
    estimate = decoded_bytes(image.size, image.mode, min_size, image.format)
    with reserve(estimate) if reserve else nullcontext():
        try:
            image.load()
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise InvalidImage(f"corrupt or truncated image data: {exc}") from None
        turn = _turn_of(image)
        rgb = _shrink_to_rgb(image, _reduce_factor(image.size, min_size))
        del image  # the full-size pixels go before the small image's own copies
        upright = (height, width) if turn in _SWAPS else (width, height)
        return finish(rgb.transpose(turn) if turn is not None else rgb, upright)


def decode_image(
    data: bytes,
    min_size: int,
    limits: ImageLimits | None = None,
    reserve: Reserve | None = None,
) -> Image.Image:
    """Decode to an upright RGB image whose shorter side is still >= min_size.

    JPEGs decode in draft mode: the DCT scales down by 2, 4 or 8 while decoding, so a
    12-megapixel photo is never expanded to full size only to be shrunk to 224 pixels. Other
    formats cannot be reduced while decoding: they are shrunk by a whole factor right after,
    in their own mode or band by band, before any conversion copies them at full size.
    `reserve(bytes)` is held around the decode: a caller's bound on the memory decodes hold at
    once (estimated from the header, see decoded_bytes).
    """
    return _decode_then(data, min_size, limits, reserve, lambda image, _: image)


def _turn_of(image: Image.Image) -> Image.Transpose | None:
    """The turn its EXIF orientation asks for, read before the pixels are shrunk."""
    try:
        return _TURN.get(int(image.getexif().get(0x0112, 1)))
    except (OSError, SyntaxError, ValueError, KeyError, TypeError):
        return None  # a broken EXIF block leaves the pixels as stored


def _shrink_to_rgb(image: Image.Image, factor: int) -> Image.Image:
    """The image reduced by a whole `factor` (a box filter) and converted to RGB, never
    copied at full size in another mode."""
    if image.mode == "RGB" and factor == 1:
        return image
    if image.mode in _REDUCE_AS_IS and factor > 1:
        reduced = image.reduce(factor)
        reduced.info = image.info
        return to_rgb(reduced)
    return _shrink_in_bands(image, factor)


def _shrink_in_bands(image: Image.Image, factor: int) -> Image.Image:
    """Bands of rows, each converted to a mode reduce() takes, reduced and made RGB, pasted
    into the result: a 120-megapixel palette PNG never becomes 480 MB of RGB. Bands hold whole
    blocks of the reduction, so the result is the whole image's reduction."""
    width, height = image.size
    out = Image.new("RGB", (-(-width // factor), -(-height // factor)))
    rows = _band_rows(width, factor)
    peak = _peak_of(image)
    for top in range(0, height, rows):
        band = _reducible(image.crop((0, top, width, min(top + rows, height))))
        if factor > 1:
            band = band.reduce(factor)
        out.paste(to_rgb(band, peak), (0, top // factor))
    return out


def _reducible(band: Image.Image) -> Image.Image:
    """A band in a mode reduce() averages correctly: palettes expanded, 16-bit grey as 8."""
    if band.mode in _SIXTEEN_BIT:
        return _sixteen_to_grey(band)  # Pillow cannot reduce 16-bit grey
    if band.mode == "1":
        return band.convert("L")
    if band.mode == "P":
        return band.convert("RGBA" if "transparency" in band.info else "RGB")
    if band.mode == "PA":
        return band.convert("RGBA")
    return band


def _peak_of(image: Image.Image) -> float | None:
    """The largest value of an integer or float image (its scale to 8 bits), else None."""
    if image.mode not in ("I", "F"):
        return None
    extrema = image.getextrema()
    return float(extrema[1]) if isinstance(extrema[1], (int, float)) else None


def _sixteen_to_grey(image: Image.Image) -> Image.Image:
    """0..65535 -> 0..255 in integers: the top byte, with no wider copy of the pixels."""
    pixels = np.asarray(image)
    grey = Image.fromarray((pixels >> 8).astype(np.uint8), mode="L")
    grey.info = image.info
    return grey


def to_rgb(image: Image.Image, peak: float | None = None) -> Image.Image:
    """RGB from any mode: alpha over white, 16-bit and float scaled to 8 bits, CMYK converted.
    `peak`: the largest value of the whole image an "I" or "F" band is part of (default: its
    own), which decides the scale."""
    if image.mode == "RGB":
        return image
    # Never through float64: a 40-megapixel 16-bit grey PNG would take 320 MB per copy.
    if image.mode in _SIXTEEN_BIT:
        image = _sixteen_to_grey(image)
    elif image.mode == "I":
        ints = np.asarray(image)
        if (ints.max(initial=0) if peak is None else peak) > 255:
            ints = ints // 257  # 0..65535 -> 0..255
        image = Image.fromarray(np.clip(ints, 0, 255).astype(np.uint8), mode="L")
    elif image.mode == "F":
        floats = np.asarray(image, dtype=np.float32)
        if (floats.max(initial=0) if peak is None else peak) <= 1.0:
            floats = floats * np.float32(255.0)
        image = Image.fromarray(np.clip(floats, 0, 255).astype(np.uint8), mode="L")
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        # Transparent pixels often hide black or garbage RGB: show them as a white page would.
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def resize_and_crop(image: Image.Image, spec: ImagePreprocessing) -> Pixels:
    """open_clip's eval transform (torchvision Resize + CenterCrop) -> uint8 [size, size, 3]."""
    return _centre_crop(_resized(image, spec), spec.size)


def _resized(image: Image.Image, spec: ImagePreprocessing) -> Image.Image:
    """The eval transform's Resize: the whole image, its shorter side `size` (or squashed
    to size x size), before the centre crop."""
    size = spec.size
    resample = _RESAMPLE[spec.interpolation]
    width, height = image.size
    if spec.resize_mode == "squash":
        return image.resize((size, size), resample)
    if max(width, height) > _MAX_RATIO * min(width, height):
        image = _centre_strip(image, _MAX_RATIO * min(width, height))
        width, height = image.size
    # torchvision: the shorter side becomes `size`, the longer keeps the ratio (truncated).
    if width <= height:
        new = (size, int(size * height / width))
    else:
        new = (int(size * width / height), size)
    return image.resize(new, resample) if new != (width, height) else image


def _centre_crop(image: Image.Image, size: int) -> Pixels:
    width, height = image.size
    # round() as torchvision does it (half to even).
    left = round((width - size) / 2.0)
    top = round((height - size) / 2.0)
    return np.asarray(image.crop((left, top, left + size, top + size)), dtype=np.uint8)


def _centre_strip(image: Image.Image, keep: int) -> Image.Image:
    """The middle `keep` pixels of the longer side: all that the centre crop would keep."""
    width, height = image.size
    if width < height:
        top = (height - keep) // 2
        return image.crop((0, top, width, top + keep))
    left = (width - keep) // 2
    return image.crop((left, 0, left + keep, height))


def prepare_image(
    data: bytes,
    spec: ImagePreprocessing,
    limits: ImageLimits | None = None,
    reserve: Reserve | None = None,
) -> Pixels:
    """Bytes of any common format -> uint8 [size, size, 3], or InvalidImage with the reason;
    the resize within the decode's reservation."""
    return _decode_then(
        data, spec.size, limits, reserve, lambda image, _: resize_and_crop(image, spec)
    )


def prepare_photo(
    data: bytes,
    spec: ImagePreprocessing,
    limits: ImageLimits | None = None,
    reserve: Reserve | None = None,
) -> tuple[Pixels, PhotoPayload]:
    """prepare_image's pixels and, from the same decode, the photo's visual attributes
    (core/embedding/attributes.py: its size, orientation, colours): what the indexer stores.
    The colours are read from the encoder's resized image before its centre crop (a few
    hundred pixels a side, the whole photo): no pass over the decoded pixels of their own."""

    def both(image: Image.Image, size: tuple[int, int]) -> tuple[Pixels, PhotoPayload]:
        resized = _resized(image, spec)
        return _centre_crop(resized, spec.size), visual_attributes(resized, size)

    return _decode_then(data, spec.size, limits, reserve, both)
