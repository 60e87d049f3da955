"""Payloads as earlier releases stored them, for the tests that their points still read back
and answer as before (the keys and values the engine holds, as JSON)."""

from __future__ import annotations

from typing import Any

# A point as the previous release wrote it (indexer/photo/writer.py with its visual attributes,
# automatic tags, group and popularity), as JSON: the keys and values the engine holds.
PREVIOUS: dict[str, Any] = {
    "title": "Harbour at dawn",
    "tags": ["boat", "sea"],
    "photographer": "Ann Lee",
    "license": "cc-by",
    "created_at": "2024-05-01T06:30:00+00:00",
    "extra": {"camera": "leica"},
    "popularity": 4.0,
    "photo_id": "harbour.jpg",
    "terms": ["harbour", "dawn", "boat", "sea"],
    "shard": "day1/",
    "source_key": "day1/harbour.jpg",
    "source_uri": "file:///photos/day1/harbour.jpg",
    "source_root": "file:///photos",
    "content_version": "2048-1714545000000000000",
    "meta_hash": "0123456789abcdef",
    "model_version": 2,
    "indexed_at": "2026-01-02T03:04:05+00:00",
    "width": 6000,
    "height": 4000,
    "aspect_ratio": 1.5,
    "orientation": "landscape",
    "colors": ["blue", "grey"],
    "color_shares": {"blue": 0.62, "grey": 0.3, "white": 0.03},
    "copy_space": 0,
    "auto_tags": ["water", "boat"],
    "auto_tags_vocabulary": "5f0c6c1e3f4e4c3a",
    "dup_group": "harbour.jpg",
}
# A point of the first release: no shard, key, root, terms, attributes, tags or group.
OLDEST: dict[str, Any] = {
    "title": "Old mill",
    "tags": ["mill"],
    "photographer": None,
    "license": None,
    "created_at": None,
    "extra": {},
    "photo_id": "mill.jpg",
    "source_uri": "file:///photos/mill.jpg",
    "content_version": "512-1700000000000000000",
    "meta_hash": "",
    "model_version": 1,
    "indexed_at": "2025-11-22T10:00:00+00:00",
}
