"""The parts of a Qdrant Edge collection, as the footprint benchmark counts them: which part a
file under the collection's folder belongs to, and the bytes each part takes on disk."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from core.vectorstore.schema import PAYLOAD_INDEXES


def index_name(field: str) -> str:
    """The part a payload index is counted in: its field's, or one for the indexes of a dict's
    keys (color_shares.<palette name>: "color_shares (12 floats)")."""
    group, dot, _ = field.partition(".")
    if not dot:
        return field
    siblings = [f for f in PAYLOAD_INDEXES if f.startswith(f"{group}.")]
    return f"{group} ({len(siblings)} {PAYLOAD_INDEXES[field].kind}s)"


# Every payload index the store creates (core/vectorstore/store.py), each dict's keys as one.
INDEX_NAMES = tuple(dict.fromkeys(map(index_name, PAYLOAD_INDEXES)))
# The payload indexes' folders are named "<hash>-<the field's first 8 characters>-<kind>".
_INDEXED = {f[:8]: index_name(f) for f in PAYLOAD_INDEXES}
if len(set(_INDEXED.values())) != len(INDEX_NAMES):  # two parts would be counted as one
    raise RuntimeError(f"payload indexes share a folder prefix: {sorted(PAYLOAD_INDEXES)}")


def part_of(relative: Path) -> str:
    """The part of a collection a file under its folder belongs to."""
    parts = relative.parts
    if "wal" in parts:
        return "WAL"
    if "segments" not in parts or len(parts) < parts.index("segments") + 3:
        return "other"
    top, rest = parts[parts.index("segments") + 2], parts[parts.index("segments") + 3 :]
    if top == "vector_storage-image":
        return "quantized copies" if rest and rest[0].startswith("quantized") else "originals"
    if top == "vector_index-image":
        return "HNSW graph"
    if top.endswith("-keywords"):
        return "keywords index" if top.startswith("vector_index") else "keywords storage"
    if top.startswith("id_tracker"):
        return "id tracker"
    if top == "payload_storage":
        return "payload"
    if top == "payload_index" and rest:
        pieces = rest[0].split("-")
        if len(pieces) >= 3:
            return f"index {_INDEXED.get(pieces[1], pieces[1])}"
        return "index (config)"
    return "other"


def disk_parts(folder: Path) -> dict[str, int]:
    """Allocated bytes of each part of the collection stored under `folder`."""
    found: dict[str, int] = defaultdict(int)
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = Path(dirpath) / name
            found[part_of(path.relative_to(folder))] += path.lstat().st_blocks * 512
    return dict(found)
