"""Photo sources: a local folder tree or S3-compatible object storage, listed with versions.

The indexer lists them by key range, in key order (so a shard of the catalogue is listed at
the cost of its own size), and reads and stats single files; the query API reads one photo
back by its stored URI, under the root its point records. Every read is confined and bounded
(core/originals.py).
"""

from __future__ import annotations

from core.originals import (
    PhotoTooLarge,
    SourceError,
    SourceRefused,
    SourceUnavailable,
    check_source,
)
from core.sources.access import open_source, photo_root, read_photo
from core.sources.base import (
    PHOTO_SUFFIXES,
    Source,
    SourceObject,
    is_photo,
    unservable,
)
from core.sources.local import LocalSource
from core.sources.s3 import S3Source, s3_client, s3_errors

__all__ = [
    "PHOTO_SUFFIXES",
    "LocalSource",
    "PhotoTooLarge",
    "S3Source",
    "Source",
    "SourceError",
    "SourceObject",
    "SourceRefused",
    "SourceUnavailable",
    "check_source",
    "is_photo",
    "open_source",
    "photo_root",
    "read_photo",
    "s3_client",
    "s3_errors",
    "unservable",
]
