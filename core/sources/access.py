"""Sources opened by their URI, checked against the settings: the indexer's whole source, and
the one stored photo the query API reads back below the root its point records."""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from urllib.parse import unquote_to_bytes, urlsplit

from core.originals import (
    ReadLimits,
    SourceRefused,
    SourceRoot,
    check_source,
    key_parts,
    parse_source,
    read_file,
    real_folder,
)
from core.payload import PhotoPayload
from core.settings import Settings
from core.sources.base import Source
from core.sources.local import LocalSource
from core.sources.s3 import S3Source


def open_source(uri: str, settings: Settings) -> Source:
    """A checked source (check_source): file:///dir, an absolute folder, or s3://bucket/prefix."""
    root = parse_source(check_source(uri, settings))
    limits = ReadLimits.from_settings(settings)
    if root.scheme == "file":
        return LocalSource(real_folder(root, settings), limits)
    return S3Source(root.bucket, root.prefix, settings.s3, limits)


def photo_root(payload: PhotoPayload, remembered: str | None) -> str:
    """The root a stored photo is read under: the `source_root` its point records, else (a
    point indexed before roots were recorded) `remembered`, the source synced last; with
    neither, SourceRefused: no photo is read without a root to confine it to."""
    root = payload.get("source_root") or remembered
    if not isinstance(root, str) or not root:
        raise SourceRefused("the photo records no source root, and no source was synced")
    return root


def _key_under(root: SourceRoot, photo_uri: str) -> str:
    """The key of a stored photo's URI below its root; SourceRefused when it is not below."""
    refused = SourceRefused(f"{photo_uri!r} is not a file of the source {root.uri}")
    try:
        parts = urlsplit(photo_uri)
    except ValueError:
        raise refused from None
    if parts.scheme != root.scheme or "?" in photo_uri or "#" in photo_uri:
        raise refused
    if root.scheme == "s3":
        key = parts.path.lstrip("/")
        if parts.netloc != root.bucket or (root.prefix and not key.startswith(root.prefix + "/")):
            raise refused
        inside = key[len(root.prefix) + 1 :] if root.prefix else key
        key_parts(inside)
        return inside
    if parts.netloc.lower() not in ("", "localhost"):
        raise refused
    raw = os.fsdecode(unquote_to_bytes(parts.path))
    if not raw.startswith("/"):
        raise refused
    key_parts(raw[1:])  # no "", "." or ".." segment: PurePosixPath would drop the first two
    path = PurePosixPath(raw)
    # Points store real paths; a remembered root may be spelt through a link to them.
    for folder in (root.path, PurePosixPath(os.path.realpath(root.path))):
        if path.is_relative_to(folder) and path != folder:
            return path.relative_to(folder).as_posix()
    raise refused


def read_photo(root_uri: str, photo_uri: str, settings: Settings) -> bytes:
    """The bytes of one stored photo (`source_uri`), read only below `root_uri` (photo_root)
    and within settings.images.max_bytes and settings.sources.read_timeout_s.

    Raises FileNotFoundError when it is gone; SourceRefused when it may not be read (the root
    not accepted, the photo outside it, a link, not a regular file), PhotoTooLarge (a
    SourceRefused) past the size; ReadTimedOut (a SourceUnavailable, OSError) past the deadline,
    SourceUnavailable when S3 does not answer: worth trying again.
    """
    root = parse_source(check_source(root_uri, settings))
    limits = ReadLimits.from_settings(settings)
    key = _key_under(root, photo_uri)
    if root.scheme == "file":
        return read_file(real_folder(root, settings), key, limits)
    source = S3Source(root.bucket, root.prefix, settings.s3, limits)
    try:
        return source.read(key)
    finally:
        source.close()
