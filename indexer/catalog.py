"""A source listed and joined with its metadata manifest: the photos as they should be indexed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from indexer.metadata import PhotoMetadata, parse_manifest
from photosearch.sources import Source, is_photo


@dataclass(frozen=True)
class Photo:
    """One photo of the catalog; its identity is the manifest id, else its path."""

    photo_id: str
    key: str
    version: str
    meta_hash: str = ""
    metadata: dict[str, Any] | None = None

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
    """What a source holds now."""

    source_uri: str
    photos: dict[str, Photo] = field(default_factory=dict)
    # Files that are not photos: key -> (version, reason).
    rejected: dict[str, tuple[str, str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_catalog(source: Source, metadata_files: tuple[str, ...]) -> Catalog:
    """List the source and attach each photo's manifest row (photos without one still index)."""
    objects = {obj.key: obj for obj in source.list()}
    catalog = Catalog(source.uri)
    rows: dict[str, PhotoMetadata] = {}
    for name in metadata_files:
        if name in objects:
            text = source.read(name).decode("utf-8-sig", errors="replace")
            found, warnings = parse_manifest(name, text)
            catalog.warnings.extend(warnings)
            for path, row in found.items():
                rows.setdefault(path, row)
    for key in sorted(objects):
        obj = objects[key]
        if key in metadata_files:
            continue
        if not is_photo(key):
            suffix = PurePosixPath(key).suffix or "(no extension)"
            catalog.rejected[key] = (obj.version, f"unsupported file type {suffix}")
            continue
        meta = rows.pop(key) if key in rows else None
        photo_id = (meta.id if meta and meta.id else None) or key
        if photo_id in catalog.photos:
            catalog.warnings.append(f"{key}: id {photo_id!r} is already used by another photo")
            continue
        catalog.photos[photo_id] = Photo(
            photo_id,
            key,
            obj.version,
            meta.digest() if meta else "",
            meta.payload() if meta else None,
        )
    catalog.warnings.extend(f"metadata for {path}: no such photo in the source" for path in rows)
    return catalog
