"""Photo sources: a local folder tree or S3-compatible object storage, listed with versions.

The indexer lists and reads them; the query API reads one photo back by its stored URI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from photosearch.settings import S3Settings

# What the indexer embeds; GIF is read at its first frame, TIFF at its first page.
PHOTO_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".gif", ".tif", ".tiff"})


class SourceError(Exception):
    """The source URI is malformed or cannot be listed."""


@dataclass(frozen=True)
class SourceObject:
    """One file of the source: its key (relative path) and its content version."""

    key: str
    version: str
    size: int


class Source(Protocol):
    """A catalog of photo files that can be listed and read."""

    uri: str

    def list(self) -> Iterator[SourceObject]:
        """Every file under the root (hidden files and folders left out), in no set order."""

    def read(self, key: str) -> bytes:
        """A file's bytes; FileNotFoundError when it is gone."""

    def uri_of(self, key: str) -> str:
        """The address of one file, stored with its point."""


def is_photo(key: str) -> bool:
    return PurePosixPath(key).suffix.lower() in PHOTO_SUFFIXES


def _hidden(name: str) -> bool:
    return name.startswith(".")


class LocalSource:
    """A folder tree; a file's version is its size and modification time in nanoseconds."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.uri = self.root.as_uri()
        if not self.root.is_dir():
            raise SourceError(f"{self.root} is not a folder")

    def list(self) -> Iterator[SourceObject]:
        # os.scandir keeps stat results from the directory read: 100k files list in ~1 s.
        stack = [self.root]
        while stack:
            folder = stack.pop()
            with os.scandir(folder) as entries:
                for entry in entries:
                    if _hidden(entry.name):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        stat = entry.stat()
                        key = Path(entry.path).relative_to(self.root).as_posix()
                        yield SourceObject(key, f"{stat.st_size}-{stat.st_mtime_ns}", stat.st_size)

    def read(self, key: str) -> bytes:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise FileNotFoundError(f"{key} is outside the source")
        return path.read_bytes()

    def uri_of(self, key: str) -> str:
        return (self.root / key).as_uri()


class S3Source:
    """A bucket prefix through s3fs; a file's version is its ETag."""

    def __init__(self, bucket: str, prefix: str, settings: S3Settings) -> None:
        import s3fs

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.root = f"{bucket}/{self.prefix}".rstrip("/")
        self.uri = f"s3://{self.root}"
        options: dict[str, Any] = {"anon": settings.anonymous}
        if settings.access_key_id:
            options["key"] = settings.access_key_id
            options["secret"] = settings.secret_access_key
        client: dict[str, Any] = {}
        if settings.endpoint_url:
            client["endpoint_url"] = settings.endpoint_url
        if settings.region:
            client["region_name"] = settings.region
        # No listing cache: a sync must see the bucket as it is now.
        self.fs = s3fs.S3FileSystem(client_kwargs=client, use_listings_cache=False, **options)

    def list(self) -> Iterator[SourceObject]:
        try:
            found: dict[str, dict[str, Any]] = self.fs.find(self.root, detail=True)
        except (OSError, ValueError) as exc:
            raise SourceError(f"cannot list {self.uri}: {exc}") from exc
        for path, info in found.items():
            key = path[len(self.root) :].lstrip("/")
            if info.get("type") != "file" or any(_hidden(p) for p in key.split("/")):
                continue
            etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
            version = etag or f"{info.get('size')}-{info.get('LastModified')}"
            yield SourceObject(key, version, int(info.get("size") or 0))

    def read(self, key: str) -> bytes:
        data: bytes = self.fs.cat_file(f"{self.root}/{key}")
        return data

    def uri_of(self, key: str) -> str:
        return f"{self.uri}/{key}"


def open_source(uri: str, s3: S3Settings) -> Source:
    """file:///dir, a plain path, or s3://bucket/prefix."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return LocalSource(Path(unquote(parsed.path) if parsed.scheme else uri))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise SourceError(f"{uri}: no bucket")
        return S3Source(parsed.netloc, parsed.path, s3)
    raise SourceError(f"{uri}: unsupported scheme {parsed.scheme!r} (file://, s3://)")


def read_uri(uri: str, s3: S3Settings) -> bytes:
    """The bytes of one stored photo by the `source_uri` its point carries."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).read_bytes()
    if parsed.scheme == "s3" and parsed.netloc:
        return S3Source(parsed.netloc, "", s3).read(parsed.path.lstrip("/"))
    raise SourceError(f"{uri}: unsupported scheme {parsed.scheme!r} (file://, s3://)")
