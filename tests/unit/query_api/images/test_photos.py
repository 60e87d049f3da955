"""A stored photo's pixels for the page: its ETag per variant and version, its media type from
the file it came from, and a thumbnail of the size asked."""

from __future__ import annotations

import io
from contextlib import nullcontext
from typing import Unpack

import pytest
from PIL import Image

from core.embedding.images import ImageLimits
from core.payload import PhotoPayload
from core.vectorstore import StoredPhoto
from query_api.http.errors import ApiError
from query_api.images.photos import etag_of, make_thumbnail, media_type


def record(**payload: Unpack[PhotoPayload]) -> StoredPhoto:
    return StoredPhoto("p1", {"source_uri": "file:///photos/a/p1.png", **payload})


def test_an_etag_names_the_photo_its_version_and_the_variant() -> None:
    v1 = record(content_version="v1")
    assert etag_of(v1, "original") == etag_of(record(content_version="v1"), "original")
    assert etag_of(v1, "original") != etag_of(v1, "thumb-256")
    assert etag_of(v1, "original") != etag_of(record(content_version="v2"), "original")
    tag = etag_of(v1, "original")
    assert tag.startswith('"') and tag.endswith('"') and len(tag) == 34


def test_the_media_type_is_the_source_file_s_and_a_photo_without_one_is_404() -> None:
    assert media_type(record()) == "image/png"
    assert media_type(record(source_uri="s3://bucket/raw/p1")) == "application/octet-stream"
    with pytest.raises(ApiError) as missing:
        media_type(StoredPhoto("p2", {}))
    assert missing.value.status == 404 and "no stored file address" in str(missing.value)


def test_a_thumbnail_is_a_jpeg_whose_longest_side_is_the_size_asked() -> None:
    image = Image.new("RGB", (640, 320), (200, 30, 30))
    data = io.BytesIO()
    image.save(data, "PNG")
    held: list[int] = []

    def reserve(amount: int) -> nullcontext[None]:
        held.append(amount)
        return nullcontext()

    thumb = Image.open(io.BytesIO(make_thumbnail(data.getvalue(), 128, ImageLimits(), reserve)))
    assert thumb.format == "JPEG" and thumb.size == (128, 64)
    assert held and held[0] >= 640 * 320  # the decode held its pixels' memory
