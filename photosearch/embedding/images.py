"""Image bytes -> the uint8 pixels of the image encoder, as open_clip's eval transform does."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from photosearch.embedding.arrays import Pixels
from photosearch.embedding.errors import ImageTooLarge, InvalidImage
from photosearch.embedding.manifest import ImagePreprocessing

_RESAMPLE = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")
# The resize scales the shorter side to `size`: a 1x60000 strip would become 224x13 million
# pixels (9 GB) only for its centre to be kept. Past this ratio the centre is cut out first.
_MAX_RATIO = 8


@dataclass(frozen=True)
class ImageLimits:
    """Refuse files or pixel counts above these (decompression bombs, accidental RAW scans)."""

    max_pixels: int = 120_000_000
    max_bytes: int = 50 * 1024 * 1024


def decode_image(data: bytes, min_size: int, limits: ImageLimits | None = None) -> Image.Image:
    """Decode to an upright RGB image whose shorter side is still >= min_size.

    JPEGs decode in draft mode: the DCT scales down by 2, 4 or 8 while decoding, so a
    12-megapixel photo is never expanded to full size only to be shrunk to 224 pixels.
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
    try:
        image.load()
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise InvalidImage(f"corrupt or truncated image data: {exc}") from None
    upright: Image.Image = image
    try:
        upright = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError, KeyError, TypeError):
        pass  # a broken EXIF block leaves the pixels as stored
    return to_rgb(upright)


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB from any mode: alpha over white, 16-bit and float scaled to 8 bits, CMYK converted."""
    if image.mode == "RGB":
        return image
    if image.mode in _SIXTEEN_BIT or image.mode in ("I", "F"):
        pixels = np.asarray(image, dtype=np.float64)
        if image.mode == "F" and pixels.max(initial=0) <= 1.0:
            pixels = pixels * 255.0
        elif image.mode != "F" and (image.mode in _SIXTEEN_BIT or pixels.max(initial=0) > 255):
            pixels = pixels / 257.0  # 0..65535 -> 0..255
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="L")
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
    data: bytes, spec: ImagePreprocessing, limits: ImageLimits | None = None
) -> Pixels:
    """Bytes of any common format -> uint8 [size, size, 3], or InvalidImage with the reason."""
    return resize_and_crop(decode_image(data, spec.size, limits), spec)
