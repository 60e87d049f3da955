"""What every photo source is: the Source protocol, one listed file (SourceObject), which keys
are photos, and which keys the API's photo routes could not serve."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

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
