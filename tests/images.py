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

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


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
