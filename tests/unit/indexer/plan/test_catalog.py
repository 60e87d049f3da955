"""One shard of a source joined with its manifests: photos, non-photos, warnings, per folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.sources import LocalSource
from indexer.plan.catalog import ShardTooBig, read_catalog
from indexer.plan.shards import ShardRange
from tests.support.indexing import write_manifest, write_photo

NAMES = ("photos.jsonl", "photos.csv")


def versions(source: LocalSource) -> dict[str, str]:
    return {o.key: o.version for o in source.list_range()}


def test_catalog_joins_metadata_and_rejects_non_photos(tmp_path: Path) -> None:
    for i, key in enumerate(["a.jpg", "day1/b.png", "c.webp", "d.jpg", "e.jpg"]):
        write_photo(tmp_path / key, i)
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "README").write_text("hello")
    write_manifest(
        tmp_path,
        [
            {"path": "a.jpg", "id": "photo-a", "title": "Cat", "tags": ["Pet"]},
            {"path": "day1/b.png", "title": "No id"},
            {"path": "gone.jpg", "id": "photo-gone"},
            {"path": "d.jpg", "id": "dup"},
            {"path": "e.jpg", "id": "dup"},
        ],
    )
    source = LocalSource(tmp_path)
    listed = versions(source)
    catalog = read_catalog(source, NAMES)
    assert catalog.source_uri == source.uri
    assert catalog.files == 8  # the manifest too
    assert sorted(catalog.photos) == ["c.webp", "day1/b.png", "dup", "photo-a"]
    a = catalog.photos["photo-a"]
    assert (a.key, a.version) == ("a.jpg", listed["a.jpg"])
    assert a.metadata is not None and a.metadata["tags"] == ["pet"] and a.meta_hash
    assert catalog.photos["day1/b.png"].metadata == {
        "title": "No id",
        "tags": [],
        "photographer": None,
        "license": None,
        "created_at": None,
        "extra": {},
    }
    plain = catalog.photos["c.webp"]
    assert (plain.metadata, plain.meta_hash) == (None, "")
    assert catalog.photos["dup"].key == "d.jpg"
    assert catalog.rejected == {
        "README": (listed["README"], "unsupported file type (no extension)"),
        "notes.txt": (listed["notes.txt"], "unsupported file type .txt"),
    }
    assert catalog.warnings == [
        "e.jpg: id 'dup' is already used by another photo",
        "metadata for gone.jpg: no such photo in the source",
    ]


def test_a_folder_manifest_describes_its_subtree_and_the_nearest_one_wins(tmp_path: Path) -> None:
    for key in ["top.jpg", "day1/a.jpg", "day1/deep/b.jpg", "day2/c.jpg"]:
        write_photo(tmp_path / key, 0)
    write_manifest(
        tmp_path,
        [
            {"path": "top.jpg", "title": "from the root"},
            {"path": "day1/a.jpg", "title": "from the root"},
            {"path": "day2/c.jpg", "title": "from the root"},
        ],
    )
    write_manifest(
        tmp_path / "day1",
        [{"path": "a.jpg", "title": "from day1"}, {"path": "deep/b.jpg", "id": "b-id"}],
    )
    (tmp_path / "day2" / "photos.csv").write_text("path,title\nc.jpg,from a csv\n")
    catalog = read_catalog(LocalSource(tmp_path), NAMES)
    titles = {p.key: (p.photo_id, (p.metadata or {}).get("title")) for p in catalog.photos.values()}
    assert titles == {
        "top.jpg": ("top.jpg", "from the root"),
        "day1/a.jpg": ("day1/a.jpg", "from day1"),
        "day1/deep/b.jpg": ("b-id", None),
        "day2/c.jpg": ("day2/c.jpg", "from a csv"),
    }
    assert catalog.warnings == []


def test_a_shard_reads_only_its_keys_and_the_manifests_above_its_ends(tmp_path: Path) -> None:
    keys = [f"day/{i:02d}.jpg" for i in range(10)]
    for i, key in enumerate(keys):
        write_photo(tmp_path / key, i)
    rows = [{"path": f"{i:02d}.jpg", "title": f"photo {i}"} for i in range(10)]
    rows.append({"path": "missing.jpg", "title": "no such photo"})
    rows.append({"path": "03.jpg", "created_at": "never"})  # a bad row, in the 2nd shard
    (tmp_path / "day" / "photos.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + "{not json\n"
    )
    source = LocalSource(tmp_path)
    # The manifest "day/photos.jsonl" sorts after every photo: only the last shard lists it;
    # the others find it above their ends.
    shards = [
        ShardRange("", "day/03.jpg"),
        ShardRange("day/03.jpg", "day/07.jpg"),
        ShardRange("day/07.jpg"),
    ]
    catalogs = [read_catalog(source, NAMES, shard) for shard in shards]
    assert [sorted(p.key for p in c.photos.values()) for c in catalogs] == [
        keys[:3],
        keys[3:7],
        keys[7:],
    ]
    for catalog in catalogs:
        for photo in catalog.photos.values():
            assert photo.metadata is not None
            assert photo.metadata["title"] == f"photo {int(photo.key[4:6])}"
    # Each warning once, from the shard holding its photo or (lines without one) the manifest.
    assert catalogs[0].warnings == []
    [bad_row] = catalogs[1].warnings
    assert bad_row.startswith("day/photos.jsonl line 12: created_at: Input should be a valid")
    assert catalogs[2].warnings == [
        "day/photos.jsonl line 13: not JSON: Expecting property name enclosed in double quotes",
        "metadata for day/missing.jpg: no such photo in the source",
    ]


def test_a_range_with_more_files_than_a_shard_may_hold_says_so(tmp_path: Path) -> None:
    for i in range(7):
        write_photo(tmp_path / f"p{i}.jpg", i)
    source = LocalSource(tmp_path)
    assert len(read_catalog(source, NAMES, limit=7).photos) == 7
    with pytest.raises(ShardTooBig):
        read_catalog(source, NAMES, limit=6)
    assert len(read_catalog(source, NAMES, ShardRange("p3.jpg"), limit=6).photos) == 4


def test_links_fifos_and_ids_the_api_cannot_serve_are_rejected_with_their_reason(
    tmp_path: Path,
) -> None:
    for i, key in enumerate(["a.jpg", "b.jpg", "c.jpg", "ok.jpg"]):
        write_photo(tmp_path / key, i)
    (tmp_path / "link.jpg").symlink_to(tmp_path / "a.jpg")
    os.mkfifo(tmp_path / "pipe.png")
    (tmp_path / "bad\x7fname.jpg").write_bytes(b"x")
    (tmp_path / b"latin1-\xe9.jpg".decode("utf-8", "surrogateescape")).write_bytes(b"x")
    write_manifest(
        tmp_path,
        [
            {"path": "a.jpg", "id": "set/similar"},
            {"path": "b.jpg", "id": "line\nbreak"},
            {"path": "c.jpg", "id": "x/../c"},
        ],
    )
    catalog = read_catalog(LocalSource(tmp_path), NAMES)
    assert list(catalog.photos) == ["ok.jpg"]
    reasons = {key: reason for key, (_, reason) in catalog.rejected.items()}
    assert reasons["link.jpg"].startswith("a symbolic link (to a file inside the source")
    assert reasons["pipe.png"] == "a FIFO, not a regular file: never opened"
    assert "U+007F" in reasons["bad\x7fname.jpg"]
    assert "not valid UTF-8" in reasons["latin1-\\xe9.jpg"]  # its key, escaped, is storable
    assert "names a route of another photo" in reasons["a.jpg"]
    assert "U+000A" in reasons["b.jpg"] and "from the manifest" in reasons["b.jpg"]
    assert "'..' segment" in reasons["c.jpg"]
