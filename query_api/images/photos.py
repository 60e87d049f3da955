"""A stored photo's pixels for the page: the original from its source, or a cached thumbnail."""

from __future__ import annotations

import hashlib
import io
import logging
import mimetypes

from PIL import Image

from core.embedding.images import ImageLimits, Reserve, decode_image
from core.sources import (
    PhotoTooLarge,
    SourceRefused,
    SourceUnavailable,
    photo_root,
    read_photo,
)
from core.vectorstore import StoredPhoto
from query_api.http.errors import ApiError, Unavailable
from query_api.services import Services

log = logging.getLogger(__name__)


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
    """Blocking: the photo file, from the folder or bucket the indexer read it from, only as a
    regular file below that source's root, within the size limit and the read deadline."""
    uri = _source_uri(record)
    photo = record.photo_id
    try:
        remembered = None
        if not record.payload.get("source_root"):  # a point from before roots were recorded
            remembered = services.jobs.recall("source") or services.settings.indexer.source
        return read_photo(photo_root(record.payload, remembered), uri, services.settings)
    except FileNotFoundError:
        raise ApiError(404, f"the file of photo {photo!r} is gone from its source") from None
    except PhotoTooLarge as exc:
        raise ApiError(422, f"the file of photo {photo!r} is too large to serve: {exc}") from None
    except SourceRefused as exc:
        # A link out of the source, a FIFO or a device where the photo was: never served. The
        # reason goes to the log, not to the caller (it may name paths outside the source).
        log.warning("refused to read photo %r (%s): %s", photo, uri, exc)
        raise ApiError(404, f"the file of photo {photo!r} cannot be read from its source") from None
    except SourceUnavailable as exc:
        raise Unavailable(
            "source",
            f"the source of photo {photo!r} did not answer: {exc}",
            services.settings.api.retry_after_s,
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
