"""One shard of a source listed and joined with its metadata: the photos as they should be indexed.

Metadata comes from manifests (`photos.jsonl`, `photos.csv`) in any folder: a manifest
describes the photos of its folder's subtree, its paths relative to that folder, and the
nearest one wins. A shard reads the manifests listed in its key range, and probes those of the
folders that straddle its ends (the folders of its first and last keys and their parents),
keeping only the rows of its own keys: its memory follows the shard, not the catalogue. At
1e8 photos keep a manifest per folder: a manifest is read whole by each shard that needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from core.payload import PhotoPayload
from core.sources import Source, SourceObject, SourceRefused, is_photo, unservable
from indexer.plan.metadata import PhotoMetadata, parse_manifest
from indexer.plan.shards import ShardRange


class ShardTooBig(Exception):
    """The range holds more files than one shard may: split it."""


@dataclass(frozen=True)
class Photo:
    """One photo of the catalog; its identity is the manifest id, else its path."""

    photo_id: str
    key: str
    version: str
    meta_hash: str = ""
    metadata: PhotoPayload | None = None  # its manifest row's payload fields

    def to_wire(self) -> dict[str, Any]:
        return {
            "photo_id": self.photo_id,
            "key": self.key,
            "version": self.version,
            "meta_hash": self.meta_hash,
            "metadata": self.metadata,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Photo:
        return cls(**data)


@dataclass
class Catalog:
    """What one shard of a source holds now."""

    source_uri: str
    photos: dict[str, Photo] = field(default_factory=dict)  # by photo id, in key order
    # Files that are not photos: key -> (version, reason).
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    files: int = 0  # everything listed in the range, manifests included


def folder_of(key: str) -> str:
    """ "a/b/c.jpg" -> "a/b/"; a key at the root -> ""."""
    head, sep, _ = key.rpartition("/")
    return head + sep


def folders_above(key: str) -> list[str]:
    """The folders a key is under, the root first: "a/b/c" -> ["", "a/", "a/b/"]."""
    parts = key.split("/")[:-1]
    return ["", *("/".join(parts[: n + 1]) + "/" for n in range(len(parts)))]


def photo_of(obj: SourceObject, meta: PhotoMetadata | None) -> Photo:
    return Photo(
        (meta.id if meta and meta.id else None) or obj.key,
        obj.key,
        obj.version,
        meta.digest() if meta else "",
        meta.payload() if meta else None,
    )


def refusal(photo: Photo) -> str | None:
    """Why a photo may not be indexed although its file reads: the API's photo routes could
    not serve its key or its id (a newline in a file name once made a photo that every route
    answered 404 for). None: it may."""
    why = unservable(photo.key)
    if why is None and photo.photo_id != photo.key:
        id_why = unservable(photo.photo_id)
        why = id_why and f"its id {photo.photo_id!r} from the manifest: {id_why}"
    return why


class Manifests:
    """The manifest rows of the keys `wanted` accepts, each manifest read once.

    owns: whether warnings about a manifest's lines that name no photo are ours to give (the
    shard that holds the manifest file gives them)."""

    def __init__(
        self,
        source: Source,
        names: tuple[str, ...],
        wanted: Callable[[str], bool],
        owns: Callable[[str], bool],
    ) -> None:
        self.source = source
        self.names = names
        self.wanted = wanted
        self.owns = owns
        self.warnings: list[str] = []
        self.rows: dict[str, PhotoMetadata] = {}  # full key -> row
        self._rank: dict[str, tuple[int, int]] = {}  # full key -> (folder depth, -name rank)
        self._read: set[str] = set()

    def is_manifest(self, key: str) -> bool:
        return PurePosixPath(key).name in self.names

    def _fetch(self, manifest_key: str) -> bytes | None:
        try:
            return self.source.read(manifest_key)
        except FileNotFoundError:
            return None
        except SourceRefused as exc:  # a folder, a link, a FIFO, too large: not read
            self.warnings.append(f"{manifest_key}: {exc}")
            return None

    def load(self, manifest_key: str, data: bytes | None = None) -> None:
        """Read one manifest file (listed in the range, or probed outside it), unless read."""
        if manifest_key in self._read:
            return
        self._read.add(manifest_key)
        if data is None:
            data = self._fetch(manifest_key)
            if data is None:
                return
        folder = folder_of(manifest_key)
        found, warnings = parse_manifest(
            manifest_key,
            data.decode("utf-8-sig", errors="replace"),
            keep=lambda path: self.wanted(folder + path),
            lines_without_path=self.owns(manifest_key),
        )
        self.warnings.extend(warnings)
        # The nearest folder's manifest wins; in one folder, the first of the names.
        rank = (folder.count("/"), -self.names.index(PurePosixPath(manifest_key).name))
        for path, row in found.items():
            key = folder + path
            if key not in self.rows or rank > self._rank[key]:
                self.rows[key] = row
                self._rank[key] = rank

    def load_above(
        self, keys: Iterable[str], unless: Callable[[str], bool], threads: Executor | None = None
    ) -> None:
        """The manifests of the folders above these keys, but those `unless` accepts; fetched
        on `threads` when given (a probe is a GET on S3, mostly a 404)."""
        folders = dict.fromkeys(f for key in keys for f in folders_above(key))
        wanted = [
            folder + name
            for folder in folders
            for name in self.names
            if not unless(folder + name) and folder + name not in self._read
        ]
        fetched = (threads.map if threads else map)(self._fetch, wanted)
        for key, data in zip(wanted, fetched, strict=True):
            if data is None:
                self._read.add(key)
            else:
                self.load(key, data)


def read_catalog(
    source: Source,
    metadata_files: tuple[str, ...],
    shard: ShardRange | None = None,
    limit: int | None = None,
) -> Catalog:
    """List one shard (default: the whole source) and attach each photo's manifest row
    (photos without one still index). Raises ShardTooBig past `limit` files."""
    shard = shard or ShardRange("")
    catalog = Catalog(source.uri)
    manifests = Manifests(source, metadata_files, shard.contains, shard.contains)
    objects: list[SourceObject] = []
    for obj in source.list_range(shard.lo, shard.hi):
        catalog.files += 1
        if limit is not None and catalog.files > limit:
            raise ShardTooBig(f"more than {limit} files from {shard.lo!r}")
        if obj.refused:  # a link, a FIFO, a device...: never read, its reason recorded
            catalog.rejected[obj.key] = (obj.version, obj.refused)
        elif manifests.is_manifest(obj.key):
            manifests.load(obj.key)
        else:
            objects.append(obj)
    # A folder holding keys on both sides of an end of the range (its first key's folders,
    # and those of the key after its last) may keep its manifest outside the range: probed.
    # Any other folder with keys in the range lies wholly in it, its manifest listed above.
    ends = [shard.lo] + ([shard.hi] if shard.hi is not None else [])
    manifests.load_above(ends, unless=shard.contains)
    catalog.warnings.extend(manifests.warnings)
    rows = manifests.rows
    for obj in objects:
        if not is_photo(obj.key):
            suffix = PurePosixPath(obj.key).suffix or "(no extension)"
            catalog.rejected[obj.key] = (obj.version, f"unsupported file type {suffix}")
            continue
        photo = photo_of(obj, rows.pop(obj.key, None))
        why = refusal(photo)
        if why is not None:
            catalog.rejected[obj.key] = (obj.version, why)
            continue
        if photo.photo_id in catalog.photos:
            catalog.warnings.append(
                f"{obj.key}: id {photo.photo_id!r} is already used by another photo"
            )
            continue
        catalog.photos[photo.photo_id] = photo
    catalog.warnings.extend(f"metadata for {key}: no such photo in the source" for key in rows)
    return catalog
