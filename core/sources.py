"""Photo sources: a local folder tree or S3-compatible object storage, listed with versions.

The indexer lists them by key range, in key order (so a shard of the catalogue is listed at
the cost of its own size), and reads and stats single files; the query API reads one photo
back by its stored URI, under the root its point records. Every read is confined and bounded
(core/originals.py).
"""

from __future__ import annotations

import os
import stat as stat_mode
import time
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import unquote_to_bytes, urlsplit

from core.originals import (
    DEFAULT_LIMITS,
    PhotoTooLarge,
    ReadLimits,
    ReadTimedOut,
    SourceError,
    SourceRefused,
    SourceRoot,
    SourceUnavailable,
    check_source,
    file_kind,
    key_parts,
    parse_source,
    read_bounded,
    read_file,
    real_folder,
    too_large,
)
from core.settings import S3Settings, Settings

__all__ = [
    "PHOTO_SUFFIXES",
    "LocalSource",
    "PhotoTooLarge",
    "ReadLimits",
    "ReadTimedOut",
    "S3Source",
    "Source",
    "SourceError",
    "SourceObject",
    "SourceRefused",
    "SourceUnavailable",
    "check_source",
    "open_source",
    "photo_root",
    "read_photo",
    "s3_client",
    "s3_errors",
    "unservable",
]

# What the indexer embeds; GIF is read at its first frame, TIFF at its first page.
PHOTO_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".gif", ".tif", ".tiff"})


@dataclass(frozen=True)
class SourceObject:
    """One file of the source: its key (relative path) and its content version; `refused`
    says why it is listed but never read (a link, a FIFO, a name that is not UTF-8)."""

    key: str
    version: str
    size: int
    refused: str = ""


# The photo routes take an id as the path below /v1/photos/: these last segments name the
# routes of a photo, so an id ending in one is read as another photo's sub-resource.
_ROUTE_SUFFIXES = frozenset({"similar", "duplicates", "image", "thumbnail"})


def unservable(key: str) -> str | None:
    """Why the API could not serve a photo of this key (or id) at its routes, or None.

    A route's path is one line of URL: a newline never matches it (a photo indexed with one
    answered 404 at every route), and no control character survives proxies and pages alike;
    "", "." and ".." segments are merged or resolved by clients and proxies before the API
    sees them; a name that is not UTF-8 cannot be stored or sent at all."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not valid UTF-8, so it cannot be stored or served"
    for char in key:
        if unicodedata.category(char) == "Cc":
            return (
                f"its name holds the control character U+{ord(char):04X}, which the API's "
                "photo routes cannot serve: rename the file"
            )
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "its name has an empty, '.' or '..' segment, which URLs do not keep"
    if len(parts) > 1 and parts[-1] in _ROUTE_SUFFIXES:
        return f"an id ending in '/{parts[-1]}' names a route of another photo"
    return None


class Source(Protocol):
    """A catalog of photo files that can be listed and read."""

    uri: str

    def list_range(self, lo: str = "", hi: str | None = None) -> Iterator[SourceObject]:
        """The files whose key is in [lo, hi) (hi None: no end), in key order (code points,
        which is UTF-8 byte order too); hidden files and folders left out."""

    def stat(self, key: str) -> SourceObject | None:
        """One file's version now, or None when it is not there (or not a file)."""

    def read(self, key: str) -> bytes:
        """A file's bytes, within the source's ReadLimits; FileNotFoundError when it is gone,
        SourceRefused (PhotoTooLarge) when it may not be read, ReadTimedOut past the deadline."""

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


def _listed_name(name: str) -> str:
    """A file name as its key spells it: one that is not UTF-8 (os.scandir gives its bytes
    as lone surrogates) escaped, so that its skip record can be stored and shown."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return name


def _not_utf8(name: str, what: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"the name of {what} is not valid UTF-8: rename it to index the photo"
    return ""


class LocalSource:
    """A folder tree; a file's version is its size and modification time in nanoseconds."""

    def __init__(self, root: Path, limits: ReadLimits = DEFAULT_LIMITS) -> None:
        self.root = root.resolve()
        self.limits = limits
        self.uri = self.root.as_uri()
        if not self.root.is_dir():
            raise SourceError(f"{self.root} is not a folder")

    def list_range(self, lo: str = "", hi: str | None = None) -> Iterator[SourceObject]:
        yield from self._walk(self.root, "", lo, hi)

    def _walk(
        self, folder: Path, prefix: str, lo: str, hi: str | None, refused: str = ""
    ) -> Iterator[SourceObject]:
        # A folder's entries sorted as their keys sort: a sub-folder's keys all start with
        # "name/", so it sorts as "name/" among its siblings ("a.jpg" < "a/..." < "a0.jpg").
        # Only the folders on the way to [lo, hi) are read, and only files in it are stat'ed.
        # Every entry but the hidden ones is listed, what cannot be read (a link, a FIFO, a
        # device) with its reason: the sync records it as skipped, never leaves it silently.
        with os.scandir(folder) as scan:
            entries = sorted(
                (_listed_name(e.name) + ("/" if e.is_dir(follow_symlinks=False) else ""), e)
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
                inner = refused or _not_utf8(entry.name, "a folder above it")
                yield from self._walk(Path(entry.path), key, lo, hi, inner)
            elif key >= lo:
                found = entry.stat(follow_symlinks=False)  # never opened: a FIFO would block
                why = refused or _not_utf8(entry.name, "the file") or self._refusal(entry, found)
                version = f"{found.st_size}-{found.st_mtime_ns}"
                yield SourceObject(key, version, found.st_size, why)

    def _refusal(self, entry: os.DirEntry[str], found: os.stat_result) -> str:
        """Why a listed entry is never read, or "" for a regular file."""
        if stat_mode.S_ISREG(found.st_mode):
            return ""
        if not stat_mode.S_ISLNK(found.st_mode):
            return f"{file_kind(found.st_mode)}, not a regular file: never opened"
        # Links are never followed, wherever they lead: the API reads originals without
        # following any (core/originals.py), so a photo indexed through one could not be
        # served; one inside the source would index its file twice, under two keys; and a
        # link can be pointed elsewhere between a check and the read.
        if not Path(os.path.realpath(entry.path)).is_relative_to(self.root):
            return "a symbolic link leading out of the source: links are never followed"
        return (
            "a symbolic link (to a file inside the source, indexed under its own name): "
            "links are never followed"
        )

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
        return read_file(self.root, key, self.limits)

    def uri_of(self, key: str) -> str:
        return (self.root / key).as_uri()

    def key_of(self, uri: str) -> str | None:
        parsed = urlsplit(uri)
        if parsed.scheme != "file":
            return None
        path = Path(os.fsdecode(unquote_to_bytes(parsed.path)))
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

    def __init__(
        self, bucket: str, prefix: str, settings: S3Settings, limits: ReadLimits = DEFAULT_LIMITS
    ) -> None:
        self.bucket = bucket
        self.limits = limits
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

        deadline = time.monotonic() + self.limits.timeout_s
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.key_prefix + key)
            body = reply["Body"]
            try:
                size = int(reply.get("ContentLength") or 0)
                if size > self.limits.max_bytes:
                    raise PhotoTooLarge(too_large(size, self.limits))
                data = read_bounded(body.read, self.limits, deadline)
            finally:
                body.close()
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


def open_source(uri: str, settings: Settings) -> Source:
    """A checked source (check_source): file:///dir, an absolute folder, or s3://bucket/prefix."""
    root = parse_source(check_source(uri, settings))
    limits = ReadLimits.from_settings(settings)
    if root.scheme == "file":
        return LocalSource(real_folder(root, settings), limits)
    return S3Source(root.bucket, root.prefix, settings.s3, limits)


def photo_root(payload: Mapping[str, Any], remembered: str | None) -> str:
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
