"""Photo sources: a local folder tree or S3-compatible object storage, listed with versions.

The indexer lists them by key range, in key order (so a shard of the catalogue is listed at
the cost of its own size), and reads and stats single files; the query API reads one photo
back by its stored URI.
"""

from __future__ import annotations

import os
import stat as stat_mode
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from photosearch.settings import S3Settings

# What the indexer embeds; GIF is read at its first frame, TIFF at its first page.
PHOTO_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".gif", ".tif", ".tiff"})


class SourceError(Exception):
    """The source URI is malformed, or the source refuses to be listed (a final answer)."""


class SourceUnavailable(SourceError, OSError):
    """The source did not answer (network, throttling, a 5xx): worth trying again later."""


@dataclass(frozen=True)
class SourceObject:
    """One file of the source: its key (relative path) and its content version."""

    key: str
    version: str
    size: int


class Source(Protocol):
    """A catalog of photo files that can be listed and read."""

    uri: str

    def list_range(self, lo: str = "", hi: str | None = None) -> Iterator[SourceObject]:
        """The files whose key is in [lo, hi) (hi None: no end), in key order (code points,
        which is UTF-8 byte order too); hidden files and folders left out."""

    def stat(self, key: str) -> SourceObject | None:
        """One file's version now, or None when it is not there (or not a file)."""

    def read(self, key: str) -> bytes:
        """A file's bytes; FileNotFoundError when it is gone."""

    def uri_of(self, key: str) -> str:
        """The address of one file, stored with its point."""

    def key_of(self, uri: str) -> str | None:
        """The key of a file of this source from its address; None when it is not one."""

    def close(self) -> None:
        """Release its connections (an S3 client's pool)."""


def is_photo(key: str) -> bool:
    return PurePosixPath(key).suffix.lower() in PHOTO_SUFFIXES


def is_hidden(key: str) -> bool:
    return any(part.startswith(".") for part in key.split("/"))


def in_range(key: str, lo: str, hi: str | None) -> bool:
    return key >= lo and (hi is None or key < hi)


class LocalSource:
    """A folder tree; a file's version is its size and modification time in nanoseconds."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.uri = self.root.as_uri()
        if not self.root.is_dir():
            raise SourceError(f"{self.root} is not a folder")

    def list_range(self, lo: str = "", hi: str | None = None) -> Iterator[SourceObject]:
        yield from self._walk(self.root, "", lo, hi)

    def _walk(self, folder: Path, prefix: str, lo: str, hi: str | None) -> Iterator[SourceObject]:
        # A folder's entries sorted as their keys sort: a sub-folder's keys all start with
        # "name/", so it sorts as "name/" among its siblings ("a.jpg" < "a/..." < "a0.jpg").
        # Only the folders on the way to [lo, hi) are read, and only files in it are stat'ed.
        with os.scandir(folder) as scan:
            entries = sorted(
                ((e.name + "/" if e.is_dir(follow_symlinks=False) else e.name), e)
                for e in scan
                if not e.name.startswith(".")
            )
        for name, entry in entries:
            key = prefix + name
            if hi is not None and key >= hi:
                return  # this entry and every one after it sort at or past the end
            if name.endswith("/"):
                # Below this folder every key starts with `key`: skip it when lo is past them.
                if key < lo and not lo.startswith(key):
                    continue
                yield from self._walk(Path(entry.path), key, lo, hi)
            elif key >= lo and entry.is_file(follow_symlinks=False):
                stat = entry.stat()
                yield SourceObject(key, f"{stat.st_size}-{stat.st_mtime_ns}", stat.st_size)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise FileNotFoundError(f"{key} is outside the source")
        return path

    def stat(self, key: str) -> SourceObject | None:
        # Only a key as the listing spells it: no "..", no "./", no hidden part.
        parts = key.split("/")
        if is_hidden(key) or any(part in ("", ".", "..") for part in parts):
            return None
        try:
            found = (self.root / key).lstat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat_mode.S_ISREG(found.st_mode):
            return None  # a symlink or a folder: the listing leaves them out too
        return SourceObject(key, f"{found.st_size}-{found.st_mtime_ns}", found.st_size)

    def read(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def uri_of(self, key: str) -> str:
        return (self.root / key).as_uri()

    def key_of(self, uri: str) -> str | None:
        parsed = urlparse(uri)
        if parsed.scheme != "file":
            return None
        path = Path(unquote(parsed.path))
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else None

    def close(self) -> None:
        pass


def s3_client(settings: S3Settings, service: str = "s3", endpoint_url: str | None = None) -> Any:
    """A boto3 client for S3 (or SQS) with the settings' endpoint and keys, else the AWS chain."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    options: dict[str, Any] = {
        "config": Config(
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            signature_version=UNSIGNED if settings.anonymous else None,
        )
    }
    if endpoint_url or settings.endpoint_url:
        options["endpoint_url"] = endpoint_url or settings.endpoint_url
    if settings.region:
        options["region_name"] = settings.region
    if settings.access_key_id:
        options["aws_access_key_id"] = settings.access_key_id
        options["aws_secret_access_key"] = settings.secret_access_key
    # A session per client: boto3's default session is not safe across threads; clients are.
    return boto3.session.Session().client(service, **options)


def s3_errors(what: str, exc: Exception) -> SourceError:
    """A boto error as ours: a refusal (4xx) is final, anything else worth retrying."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if 400 <= status < 500 and status not in (408, 429):
            return SourceError(f"{what}: {exc}")
    return SourceUnavailable(f"{what}: {exc}")


class S3Source:
    """A bucket prefix through boto3; a file's version is its ETag."""

    def __init__(self, bucket: str, prefix: str, settings: S3Settings) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.root = f"{bucket}/{self.prefix}".rstrip("/")
        self.uri = f"s3://{self.root}"
        self.key_prefix = f"{self.prefix}/" if self.prefix else ""
        self.client = s3_client(settings)

    def list_range(self, lo: str = "", hi: str | None = None) -> Iterator[SourceObject]:
        from botocore.exceptions import BotoCoreError, ClientError

        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.key_prefix}
        if lo:
            # Listing starts *after* StartAfter: after lo less its last character, every key
            # from lo on comes (with the few between, filtered here).
            request["StartAfter"] = self.key_prefix + lo[:-1]
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**request):
                for item in page.get("Contents", []):
                    key = item["Key"][len(self.key_prefix) :]
                    if hi is not None and key >= hi:
                        return
                    if key < lo or not key or key.endswith("/") or is_hidden(key):
                        continue
                    yield SourceObject(key, item["ETag"].strip('"'), int(item["Size"]))
        except (BotoCoreError, ClientError) as exc:
            raise s3_errors(f"cannot list {self.uri}", exc) from exc

    def stat(self, key: str) -> SourceObject | None:
        from botocore.exceptions import BotoCoreError, ClientError

        if not key or key.endswith("/") or is_hidden(key):
            return None
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.key_prefix + key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise s3_errors(f"cannot stat {self.uri_of(key)}", exc) from exc
        except BotoCoreError as exc:
            raise s3_errors(f"cannot stat {self.uri_of(key)}", exc) from exc
        return SourceObject(key, str(head["ETag"]).strip('"'), int(head["ContentLength"]))

    def read(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.key_prefix + key)
            data: bytes = reply["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(self.uri_of(key)) from exc
            raise s3_errors(f"cannot read {self.uri_of(key)}", exc) from exc
        except BotoCoreError as exc:
            raise s3_errors(f"cannot read {self.uri_of(key)}", exc) from exc
        return data

    def uri_of(self, key: str) -> str:
        return f"{self.uri}/{key}"

    def key_of(self, uri: str) -> str | None:
        return uri[len(self.uri) + 1 :] if uri.startswith(self.uri + "/") else None

    def close(self) -> None:
        self.client.close()


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
        source = S3Source(parsed.netloc, "", s3)
        try:
            return source.read(parsed.path.lstrip("/"))
        finally:
            source.close()
    raise SourceError(f"{uri}: unsupported scheme {parsed.scheme!r} (file://, s3://)")
