"""A stored photo's pixels for the page: the original from its source, or a cached thumbnail."""

from __future__ import annotations

import hashlib
import io
import mimetypes

from PIL import Image

from photosearch.embedding.images import ImageLimits, Reserve, decode_image
from photosearch.sources import SourceError, read_uri
from photosearch.vectorstore import StoredPhoto
from query_api.errors import ApiError
from query_api.services import Services


def _source_uri(record: StoredPhoto) -> str:
    uri = record.payload.get("source_uri")
    if not isinstance(uri, str) or not uri:
        raise ApiError(404, f"photo {record.photo_id!r} has no stored file address")
    return uri


def etag_of(record: StoredPhoto, variant: str) -> str:
    version = str(record.payload.get("content_version", ""))
    digest = hashlib.sha256(f"{record.photo_id}\0{version}\0{variant}".encode()).hexdigest()
    return f'"{digest[:32]}"'


def media_type(record: StoredPhoto) -> str:
    guessed, _ = mimetypes.guess_type(_source_uri(record))
    return guessed or "application/octet-stream"


def read_original(services: Services, record: StoredPhoto) -> bytes:
    """Blocking: the photo file, from the folder or bucket the indexer read it from."""
    try:
        return read_uri(_source_uri(record), services.settings.s3)
    except (FileNotFoundError, SourceError):
        raise ApiError(
            404, f"the file of photo {record.photo_id!r} is gone from its source"
        ) from None


def make_thumbnail(data: bytes, size: int, limits: ImageLimits, reserve: Reserve) -> bytes:
    """Blocking: a JPEG whose longest side is `size`, upright; JPEGs decoded in draft mode,
    others shrunk right after decoding, the decode holding its memory through `reserve`."""
    image = decode_image(data, size, limits, reserve)
    image.thumbnail((size, size), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=82, optimize=True)
    return out.getvalue()


def thumbnail_key(services: Services, etag: str) -> str:
    return f"{services.settings.redis.prefix}:thumb:{etag.strip(chr(34))}"
