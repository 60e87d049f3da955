"""Image bytes -> the uint8 pixels of the image encoder, as open_clip's eval transform does."""

from __future__ import annotations

import io
import warnings
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from core.embedding.arrays import Pixels
from core.embedding.budget import Reserve as Reserve
from core.embedding.errors import ImageTooLarge, InvalidImage
from core.embedding.manifest import ImagePreprocessing
from core.settings import ImageSettings

_RESAMPLE = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")
# Bytes Pillow keeps per pixel: 1 for 8-bit single bands, 2 for 16-bit grey, else 4 (RGB too).
_ONE_BYTE = ("1", "L", "P")
# A decode is shrunk by whole factors while the shorter side keeps twice what the resize needs,
# as Pillow's own `reducing_gap=2` does: the resample from there is as good as from full size.
_REDUCING_GAP = 2
# Converting the shrunk image to RGB and resizing it: its 4 bytes per pixel a few times over.
_CONVERT_COPIES = 3

# The resize scales the shorter side to `size`: a 1x60000 strip would become 224x13 million
# pixels (9 GB) only for its centre to be kept. Past this ratio the centre is cut out first.
_MAX_RATIO = 8


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


def decoded_bytes(size: tuple[int, int], mode: str, min_size: int) -> int:
    """What decoding an image of this size and mode holds at its peak, estimated from its header:
    the decoded pixels, then the shrunk copy that is converted and resized."""
    width, height = size
    factor = _reduce_factor(size, min_size)
    small = (width // factor + 1) * (height // factor + 1)
    sixteen = width * height if mode in _SIXTEEN_BIT else 0  # the 8-bit copy of grey 16-bit
    return width * height * bytes_per_pixel(mode) + sixteen + small * 4 * _CONVERT_COPIES


def _reduce_factor(size: tuple[int, int], min_size: int) -> int:
    return max(1, min(size) // (_REDUCING_GAP * max(min_size, 1)))


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
    before any conversion copies them. `reserve(bytes)` is held around the decode: a caller's
    bound on the memory decodes hold at once (estimated from the header, see decoded_bytes).
    """
    limits = limits or ImageLimits()
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
    if image.format == "JPEG":
        image.draft(image.mode, (min_size, min_size))
    held = reserve(decoded_bytes(image.size, image.mode, min_size)) if reserve else nullcontext()
    with held:
        try:
            image.load()
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise InvalidImage(f"corrupt or truncated image data: {exc}") from None
        upright: Image.Image = _shrink(image, min_size)
        try:
            upright = ImageOps.exif_transpose(upright)
        except (OSError, SyntaxError, ValueError, KeyError, TypeError):
            pass  # a broken EXIF block leaves the pixels as stored
        return to_rgb(upright)


def _shrink(image: Image.Image, min_size: int) -> Image.Image:
    """A whole-factor box reduction of a large decode, before it is converted or resized."""
    factor = _reduce_factor(image.size, min_size)
    if factor < 2:
        return image
    if image.mode in _SIXTEEN_BIT:
        image = _sixteen_to_grey(image)  # Pillow cannot reduce 16-bit grey
    elif image.mode in ("1", "P"):
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    reduced = image.reduce(factor)
    reduced.info = image.info  # EXIF orientation, transparency
    return reduced


def _sixteen_to_grey(image: Image.Image) -> Image.Image:
    """0..65535 -> 0..255 in integers: the top byte, with no wider copy of the pixels."""
    pixels = np.asarray(image)
    grey = Image.fromarray((pixels >> 8).astype(np.uint8), mode="L")
    grey.info = image.info
    return grey


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB from any mode: alpha over white, 16-bit and float scaled to 8 bits, CMYK converted."""
    if image.mode == "RGB":
        return image
    # Never through float64: a 40-megapixel 16-bit grey PNG would take 320 MB per copy.
    if image.mode in _SIXTEEN_BIT:
        image = _sixteen_to_grey(image)
    elif image.mode == "I":
        ints = np.asarray(image)
        if ints.max(initial=0) > 255:
            ints = ints // 257  # 0..65535 -> 0..255
        image = Image.fromarray(np.clip(ints, 0, 255).astype(np.uint8), mode="L")
    elif image.mode == "F":
        floats = np.asarray(image, dtype=np.float32)
        if floats.max(initial=0) <= 1.0:
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
    size = spec.size
    resample = _RESAMPLE[spec.interpolation]
    width, height = image.size
    if spec.resize_mode == "squash":
        image = image.resize((size, size), resample)
    else:
        if max(width, height) > _MAX_RATIO * min(width, height):
            image = _centre_strip(image, _MAX_RATIO * min(width, height))
            width, height = image.size
        # torchvision: the shorter side becomes `size`, the longer keeps the ratio (truncated).
        if width <= height:
            new = (size, int(size * height / width))
        else:
            new = (int(size * width / height), size)
        if new != (width, height):
            image = image.resize(new, resample)
        width, height = image.size
        # round() as torchvision does it (half to even).
        left = round((width - size) / 2.0)
        top = round((height - size) / 2.0)
        image = image.crop((left, top, left + size, top + size))
    return np.asarray(image, dtype=np.uint8)


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
    """Bytes of any common format -> uint8 [size, size, 3], or InvalidImage with the reason."""
    return resize_and_crop(decode_image(data, spec.size, limits, reserve), spec)
