"""Originals confined: which source URIs are accepted, and reads of one file bounded to a
regular file under its root, a size and a deadline; the errors sources raise.

A source is `file:///abs/path` (no host but "localhost", which RFC 8089 lets mean this
machine; an absolute path is taken as one) or `s3://bucket/prefix`, optionally under one of
`sources.allowed_roots`. A local file is read only through directories opened one by one
below its root without following a link, and only when it is a regular file: a photo swapped
for a link to /etc/passwd, a FIFO or a device is refused, never read or waited on.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes, urlsplit

if TYPE_CHECKING:
    from core.settings import Settings

USAGE = "use a folder (an absolute path), file:///abs/path or s3://bucket/prefix"
CHUNK_BYTES = 1 << 20
# Lenient on purpose: S3-compatible stores (and old AWS buckets) allow more than DNS names.
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SourceError(Exception):
    """The source URI is malformed, or the source refuses to be listed (a final answer)."""


class SourceUnavailable(SourceError, OSError):
    """The source did not answer (network, throttling, a 5xx): worth trying again later."""


class SourceRefused(SourceError):
    """Refused for good, nothing read: a source not accepted (a host, a relative path, another
    scheme, outside the allowed roots), or a file that is not a regular file inside its root
    (a link on its way, a FIFO, a device, a folder, a path leaving the root)."""


class PhotoTooLarge(SourceRefused):
    """The file is larger than `images.max_bytes` (found before reading it, or while)."""


class ReadTimedOut(SourceUnavailable, TimeoutError):
    """Reading one file took longer than `sources.read_timeout_s`: worth trying again later."""


@dataclass(frozen=True)
class ReadLimits:
    """The bounds of reading one file: its size, and how long the read may take."""

    max_bytes: int = 50 * 1024 * 1024
    timeout_s: float = 30.0

    @classmethod
    def from_settings(cls, settings: Settings) -> ReadLimits:
        return cls(settings.images.max_bytes, settings.sources.read_timeout_s)


DEFAULT_LIMITS = ReadLimits()


def too_large(size: int, limits: ReadLimits) -> str:
    return f"file is {size} bytes, the limit is {limits.max_bytes}"


# --- source URIs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRoot:
    """A parsed, normalized source. `path` is the folder, or "/" + the prefix of a bucket, so
    containment is one path comparison (by whole segments) for both kinds."""

    scheme: str  # "file" or "s3"
    bucket: str  # "" for a folder
    path: PurePosixPath

    @property
    def uri(self) -> str:
        if self.scheme == "file":
            return Path(self.path).as_uri()
        return f"s3://{self.bucket}{'' if self.prefix == '' else '/' + self.prefix}"

    @property
    def prefix(self) -> str:
        return str(self.path).lstrip("/")

    def contains(self, other: SourceRoot) -> bool:
        """Whether `other` is this root or lies below it."""
        return (other.scheme, other.bucket) == (self.scheme, self.bucket) and (
            other.path.is_relative_to(self.path)
        )


def _refused(uri: str, why: str) -> SourceRefused:
    return SourceRefused(f"source {uri!r}: {why}")


def _folder(uri: str, path: str) -> SourceRoot:
    if "\0" in path:
        raise _refused(uri, "a NUL character in the path")
    if not path.startswith("/"):
        raise _refused(uri, f"a relative path; {USAGE}")
    normal = posixpath.normpath(path)
    # POSIX keeps a leading "//" as implementation-defined; here it is just "/".
    return SourceRoot("file", "", PurePosixPath("/" + normal.lstrip("/")))


def parse_source(uri: str) -> SourceRoot:
    """A source URI (or an absolute folder path) in its one spelling; SourceRefused saying why
    when it is not one PhotoSearch reads."""
    if uri.startswith("/"):
        return _folder(uri, uri)
    try:
        parts = urlsplit(uri)
    except ValueError:  # "s3://[bucket": an unclosed IPv6 bracket
        raise _refused(uri, USAGE) from None
    if "?" in uri or "#" in uri:
        raise _refused(uri, "a query or fragment is not part of a source (encode ? and #)")
    if parts.scheme == "file":
        if parts.netloc.lower() not in ("", "localhost"):
            raise _refused(
                uri, f"a file URI names no host (file:///abs/path), not {parts.netloc!r}"
            )
        return _folder(uri, os.fsdecode(unquote_to_bytes(parts.path)))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise _refused(uri, "no bucket (s3://bucket/prefix)")
        if not _BUCKET.fullmatch(parts.netloc):
            raise _refused(uri, f"{parts.netloc!r} is not a bucket name")
        prefix = parts.path.strip("/")
        if prefix and any(seg in ("", ".", "..") for seg in prefix.split("/")):
            raise _refused(uri, "an empty, '.' or '..' segment in the prefix")
        return SourceRoot("s3", parts.netloc, PurePosixPath("/" + prefix))
    if not parts.scheme:
        raise _refused(uri, f"a relative path; {USAGE}")
    raise _refused(uri, f"unsupported scheme {parts.scheme!r}; {USAGE}")


def allowed_roots(settings: Settings) -> list[SourceRoot]:
    roots = []
    for root in settings.sources.allowed_roots:
        try:
            roots.append(parse_source(root))
        except SourceRefused as exc:
            raise SourceRefused(f"PHOTOSEARCH_SOURCES__ALLOWED_ROOTS: {exc}") from None
    return roots


def check_source(uri: str, settings: Settings) -> str:
    """The normalized URI of a source a sync, a reindex or a read may use; SourceRefused saying
    why otherwise (malformed, a host, a relative path, another scheme, not under an allowed
    root). Every source entering PhotoSearch passes here."""
    source = parse_source(uri)
    roots = allowed_roots(settings)
    if roots and not any(root.contains(source) for root in roots):
        listed = ", ".join(root.uri for root in roots)
        raise _refused(uri, f"not under an allowed root ({listed})")
    return source.uri


def real_folder(source: SourceRoot, settings: Settings) -> Path:
    """A checked folder source's real path. Its name may lie under an allowed root while a link
    on its way leads elsewhere: the real paths are compared too."""
    real = Path(os.path.realpath(source.path))
    roots = [Path(os.path.realpath(r.path)) for r in allowed_roots(settings) if r.scheme == "file"]
    if settings.sources.allowed_roots and not any(real.is_relative_to(r) for r in roots):
        raise _refused(source.uri, f"its folder is {real}, not under an allowed root")
    return real


# --- bounded reads -----------------------------------------------------------------------------


def read_bounded(
    read: Callable[[int], bytes],
    limits: ReadLimits,
    deadline: float | None = None,
    *,
    now: Callable[[], float] = time.monotonic,
) -> bytes:
    """Everything `read(n)` gives until it gives b"", in chunks: PhotoTooLarge once past
    max_bytes (never more than one byte past it is read), ReadTimedOut once past the deadline
    (checked between chunks: one blocked call is bounded by the socket's or file system's own
    timeout). The deadline is on the clock `now`."""
    if deadline is None:
        deadline = now() + limits.timeout_s
    chunks: list[bytes] = []
    size = 0
    while True:
        if now() > deadline:
            raise ReadTimedOut(f"reading took longer than {limits.timeout_s:g} s")
        chunk = read(min(CHUNK_BYTES, limits.max_bytes + 1 - size))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limits.max_bytes:
            raise PhotoTooLarge(f"file is over {limits.max_bytes} bytes, the limit")
        chunks.append(chunk)


def key_parts(key: str) -> list[str]:
    """The segments of a key inside a root; SourceRefused for one that could leave it."""
    parts = key.split("/")
    if "\0" in key or any(part in ("", ".", "..") for part in parts):
        raise SourceRefused(f"{key!r} is not a path inside the source")
    return parts


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (from its lstat mode)."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _open_below(root: str, parts: list[str]) -> int:
    """A read-only descriptor of root/parts, each folder opened from the one before without
    following a link, so a link swapped in after any earlier check is refused too."""
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
            except NotADirectoryError:  # a link (O_NOFOLLOW), or a file where a folder was
                if stat.S_ISLNK(os.stat(part, dir_fd=folder, follow_symlinks=False).st_mode):
                    raise SourceRefused("a symbolic link below the source root") from None
                raise FileNotFoundError(errno.ENOENT, "no such folder", part) from None
            os.close(folder)
            folder = inner
        # Refused before it is opened: opening a device can have effects of its own.
        mode = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False).st_mode
        if not stat.S_ISREG(mode):
            raise SourceRefused(f"{file_kind(mode)}, not a regular file")
        try:
            return os.open(parts[-1], _FILE_FLAGS, dir_fd=folder)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # swapped for a link since the stat
                raise SourceRefused("a symbolic link, not a regular file") from None
            raise
    finally:
        os.close(folder)


def read_file(root: Path, key: str, limits: ReadLimits) -> bytes:
    """The bytes of root/key, read only as a regular file with no link anywhere below root,
    within the size and the deadline. FileNotFoundError when it is gone; SourceRefused,
    PhotoTooLarge or ReadTimedOut otherwise."""
    deadline = time.monotonic() + limits.timeout_s
    parts = key_parts(key)
    real_root = os.path.realpath(root)
    lexical = os.path.join(real_root, *parts)
    if os.path.realpath(lexical) != lexical:
        raise SourceRefused("a symbolic link below the source root")
    try:
        fd = _open_below(real_root, parts)
    except NotADirectoryError:
        raise FileNotFoundError(errno.ENOENT, "no such file", key) from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):  # swapped since the stat: a FIFO opens at once
            raise SourceRefused(f"{file_kind(found.st_mode)}, not a regular file")
        if found.st_size > limits.max_bytes:
            raise PhotoTooLarge(too_large(found.st_size, limits))
        return read_bounded(lambda n: os.read(fd, n), limits, deadline)
    finally:
        os.close(fd)
