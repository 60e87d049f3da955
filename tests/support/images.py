"""Test images: real photos that scikit-image ships, and hand-made broken files."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image
from skimage import data


def photo(name: str = "chelsea") -> Image.Image:
    """A real photograph (astronaut, chelsea, coffee, rocket, ...)."""
    return Image.fromarray(getattr(data, name)())


def encode(image: Image.Image, fmt: str = "JPEG", **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width x height pixels but carries almost no data: a decompression bomb."""

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(width: int, height: int, bit_depth: int = 1) -> bytes:
    """A complete, valid greyscale PNG of width x height pixels (1-bit white, or 16-bit
    black): kilobytes on disk that decode to width * height pixels (a real decompression
    bomb, not only a lying header)."""
    if bit_depth == 1:
        row = b"\0" + b"\xff" * ((width + 7) // 8)  # filter byte 0, then the packed bits
    else:
        row = b"\0" + b"\0" * (width * bit_depth // 8)
    compressor = zlib.compressobj(9)
    body = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)  # greyscale
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", body)
        + _chunk(b"IEND", b"")
    )


def animated_gif(first: Image.Image, then: tuple[int, int, int] = (0, 0, 255)) -> bytes:
    """A two-frame GIF: `first`, then a flat frame of another colour."""
    second = Image.new("RGB", first.size, then)
    return encode(first, "GIF", save_all=True, append_images=[second], duration=100, loop=0)


def cmyk_jpeg(image: Image.Image) -> bytes:
    return encode(image.convert("CMYK"), "JPEG", quality=92)


def sixteen_bit_png(image: Image.Image) -> bytes:
    """A greyscale PNG of 16 bits per sample (mode I;16)."""
    grey = np.asarray(image.convert("L"), dtype=np.uint16) * 257
    return encode(Image.fromarray(grey), "PNG")


def exif_rotated(upright: Image.Image) -> bytes:
    """A JPEG stored sideways with EXIF orientation 6, so a viewer shows `upright`."""
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    return encode(upright.transpose(Image.Transpose.ROTATE_90), quality=95, exif=exif)


def odd_files(image: Image.Image) -> dict[str, bytes]:
    """Unusual but valid files of one photo, keyed by a file name: each must index and search."""
    return {
        "png-named.jpg": encode(image, "PNG"),
        "animated.gif": animated_gif(image),
        "cmyk.jpg": cmyk_jpeg(image),
        "sixteen-bit.png": sixteen_bit_png(image),
        "exif-rotated.jpg": exif_rotated(image),
    }


def broken_files() -> dict[str, bytes]:
    """Files the client must refuse with InvalidImage, by what is wrong with them."""
    jpeg = encode(photo(), quality=90)
    corrupt = bytearray(jpeg)
    corrupt[200:4000] = np.random.default_rng(0).integers(0, 256, 3800, dtype=np.uint8).tobytes()
    return {
        "zero bytes": b"",
        "text named .jpg": b"this is not an image, just text\n" * 10,
        "truncated jpeg": jpeg[: len(jpeg) // 3],
        "corrupt jpeg": bytes(corrupt[:300]) + b"\xff\xd9",
        "html": b"<!doctype html><html><body>404</body></html>",
    }
