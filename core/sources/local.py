"""A local folder tree as a photo source: listed by key range without following links, each
entry that cannot be read listed with its reason."""

from __future__ import annotations

import os
import stat as stat_mode
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlsplit

from core.originals import DEFAULT_LIMITS, ReadLimits, SourceError, file_kind, read_file
from core.sources.base import SourceObject, is_hidden


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
