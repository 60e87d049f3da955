"""Photo sources (local, S3 via moto), metadata manifests, the catalog join and sync plans."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from moto.server import ThreadedMotoServer

from indexer.catalog import Catalog, Photo, read_catalog
from indexer.diff import plan_sync
from indexer.metadata import parse_manifest
from photosearch.settings import S3Settings
from photosearch.sources import LocalSource, S3Source, Source, SourceError, open_source
from photosearch.vectorstore.base import IndexedVersion
from tests.conftest import free_ports
from tests.indexing import write_manifest, write_photo

NO_S3 = S3Settings()


def listing(source: Source) -> dict[str, str]:
    return {obj.key: obj.version for obj in source.list()}


# --- LocalSource -----------------------------------------------------------------------------


def test_local_source_lists_nested_files_relative_to_root_without_hidden(tmp_path: Path) -> None:
    write_photo(tmp_path / "a.jpg", 0)
    write_photo(tmp_path / "day1" / "deep" / "b.png", 1)
    (tmp_path / ".hidden.jpg").write_bytes(b"x")
    write_photo(tmp_path / ".cache" / "c.jpg", 2)
    (tmp_path / "empty").mkdir()
    source = LocalSource(tmp_path)
    assert sorted(listing(source)) == ["a.jpg", "day1/deep/b.png"]
    obj = next(o for o in source.list() if o.key == "a.jpg")
    assert obj.size == (tmp_path / "a.jpg").stat().st_size
    assert source.read("day1/deep/b.png") == (tmp_path / "day1/deep/b.png").read_bytes()
    assert source.uri_of("a.jpg") == (tmp_path / "a.jpg").resolve().as_uri()


def test_local_version_is_size_and_mtime_and_changes_on_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "a.jpg"
    path.write_bytes(b"first")
    source = LocalSource(tmp_path)
    stat = path.stat()
    before = listing(source)["a.jpg"]
    assert before == f"{stat.st_size}-{stat.st_mtime_ns}"
    path.write_bytes(b"other")  # same size: only the modification time tells
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    same_size = listing(source)["a.jpg"]
    assert same_size != before and same_size.startswith("5-")
    path.write_bytes(b"longer content")
    assert listing(source)["a.jpg"].startswith("14-")


def test_local_read_refuses_keys_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "x").write_bytes(b"secret")
    source = LocalSource(root)
    with pytest.raises(FileNotFoundError):
        source.read("../x")
    with pytest.raises(FileNotFoundError):
        source.read("missing.jpg")


def test_open_source_takes_paths_and_file_uris_and_refuses_the_rest(tmp_path: Path) -> None:
    write_photo(tmp_path / "a.jpg", 0)
    for uri in (str(tmp_path), tmp_path.as_uri()):
        source = open_source(uri, NO_S3)
        assert isinstance(source, LocalSource) and list(listing(source)) == ["a.jpg"]
    with pytest.raises(SourceError, match="unsupported scheme 'ftp'"):
        open_source("ftp://host/photos", NO_S3)
    with pytest.raises(SourceError, match="not a folder"):
        open_source(str(tmp_path / "missing"), NO_S3)
    with pytest.raises(SourceError, match="no bucket"):
        open_source("s3:///prefix", NO_S3)


# --- S3Source against moto's server -----------------------------------------------------------


@dataclass
class S3:
    client: Any
    settings: S3Settings


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    (port,) = free_ports(1)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **credentials)
        client.create_bucket(Bucket="photos")
        settings = S3Settings(
            endpoint_url=endpoint,
            access_key_id="testing",
            secret_access_key="testing",
            region="us-east-1",
        )
        yield S3(client, settings)
        client.close()
    finally:
        server.stop()


def test_s3_source_lists_the_prefix_with_etags_and_reads(s3: S3) -> None:
    objects = {
        "cat/a.jpg": b"aaa",
        "cat/day1/b.png": b"bbbb",
        "cat/.hidden/c.jpg": b"c",
        "cat-old/d.jpg": b"d",  # a sibling prefix sharing the name's start
        "dog/e.jpg": b"e",
    }
    for key, body in objects.items():
        s3.client.put_object(Bucket="photos", Key=key, Body=body)
    source = open_source("s3://photos/cat/", s3.settings)
    assert isinstance(source, S3Source)
    assert source.uri == "s3://photos/cat"
    found = {obj.key: obj for obj in source.list()}
    assert sorted(found) == ["a.jpg", "day1/b.png"]
    etag = s3.client.head_object(Bucket="photos", Key="cat/a.jpg")["ETag"].strip('"')
    assert found["a.jpg"].version == etag and found["a.jpg"].size == 3
    assert source.read("day1/b.png") == b"bbbb"
    assert source.uri_of("day1/b.png") == "s3://photos/cat/day1/b.png"

    s3.client.put_object(Bucket="photos", Key="cat/a.jpg", Body=b"new bytes")
    s3.client.delete_object(Bucket="photos", Key="cat/day1/b.png")
    again = listing(source)
    assert list(again) == ["a.jpg"] and again["a.jpg"] != etag
    assert source.read("a.jpg") == b"new bytes"
    with pytest.raises(FileNotFoundError):
        source.read("day1/b.png")


def test_s3_source_of_a_missing_bucket_raises_source_error(s3: S3) -> None:
    source = open_source("s3://no-such-bucket/x", s3.settings)
    with pytest.raises(SourceError, match="cannot list"):
        list(source.list())


# --- Metadata manifests -----------------------------------------------------------------------


def test_jsonl_manifest_normalizes_tags_dates_and_extra_columns() -> None:
    rows = [
        {"path": "/a.jpg", "id": "p1", "tags": ["Beach", "sunset ", "beach"], "camera": "X100"},
        {"path": "b.jpg", "created_at": "2024-05-01T10:00:00"},
        {"path": "c.jpg", "created_at": "2024-05-01T10:00:00+02:00", "title": "  Sea "},
    ]
    by_path, warnings = parse_manifest("m.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert warnings == [] and sorted(by_path) == ["a.jpg", "b.jpg", "c.jpg"]
    a = by_path["a.jpg"]
    assert (a.id, a.tags, a.extra) == ("p1", ["beach", "sunset"], {"camera": "X100"})
    assert by_path["b.jpg"].created_at == datetime(2024, 5, 1, 10, tzinfo=UTC)
    c = by_path["c.jpg"]
    assert c.created_at == datetime(2024, 5, 1, 10, tzinfo=timezone(timedelta(hours=2)))
    assert c.title == "Sea"
    assert by_path["b.jpg"].payload()["created_at"] == "2024-05-01T10:00:00+00:00"


def test_csv_manifest_splits_tags_on_semicolons_and_bars() -> None:
    text = "path,id,tags,license,lens\na.jpg,p1,Sun;sea|SUN,CC-BY,\nb.jpg,,,,50mm\n"
    by_path, warnings = parse_manifest("m.csv", text)
    assert warnings == []
    assert by_path["a.jpg"].tags == ["sea", "sun"] and by_path["a.jpg"].license == "CC-BY"
    assert by_path["a.jpg"].extra == {}
    b = by_path["b.jpg"]
    assert (b.id, b.tags, b.extra) == (None, [], {"lens": "50mm"})


def test_bad_manifest_rows_warn_with_their_line_and_the_rest_parse() -> None:
    lines = [
        '{"path": "a.jpg"}',
        '{"path": "b.jpg", "created_at": "not a date"}',
        "{not json",
        '{"title": "no path"}',
        "[1, 2]",
        '{"path": "a.jpg", "title": "second"}',
        '{"path": "c.jpg"}',
    ]
    by_path, warnings = parse_manifest("m.jsonl", "\n".join(lines))
    assert sorted(by_path) == ["a.jpg", "c.jpg"] and by_path["a.jpg"].title is None
    assert [w.split(":")[0] for w in warnings] == [f"m.jsonl line {n}" for n in (2, 3, 4, 5, 6)]
    assert "created_at" in warnings[0] and "not JSON" in warnings[1]
    assert "path" in warnings[2] and "not an object" in warnings[3]
    assert "listed twice" in warnings[4]
    _, csv_warnings = parse_manifest("m.csv", "path,created_at\na.jpg,2024-13-45\nb.jpg,\n")
    assert len(csv_warnings) == 1 and csv_warnings[0].startswith("m.csv line 2: created_at")


def test_digest_changes_with_the_title_and_not_with_tag_order_or_path() -> None:
    def digest(row: dict[str, object]) -> str:
        by_path, _ = parse_manifest("m.jsonl", json.dumps(row))
        return next(iter(by_path.values())).digest()

    base = digest({"path": "a.jpg", "title": "Sea", "tags": ["b", "a"]})
    assert digest({"path": "moved/a.jpg", "title": "Sea", "tags": ["A", "b", "a"]}) == base
    assert digest({"path": "a.jpg", "title": "Sea!", "tags": ["a", "b"]}) != base


# --- read_catalog -----------------------------------------------------------------------------


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
    versions = listing(source)
    catalog = read_catalog(source, ("photos.jsonl", "photos.csv"))
    assert catalog.source_uri == source.uri
    assert sorted(catalog.photos) == ["c.webp", "day1/b.png", "dup", "photo-a"]
    a = catalog.photos["photo-a"]
    assert (a.key, a.version) == ("a.jpg", versions["a.jpg"])
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
        "README": (versions["README"], "unsupported file type (no extension)"),
        "notes.txt": (versions["notes.txt"], "unsupported file type .txt"),
    }
    assert catalog.warnings == [
        "e.jpg: id 'dup' is already used by another photo",
        "metadata for gone.jpg: no such photo in the source",
    ]


# --- plan_sync --------------------------------------------------------------------------------


def photo(photo_id: str, version: str = "v1", meta_hash: str = "") -> Photo:
    return Photo(photo_id, f"{photo_id}.jpg", version, meta_hash)


def catalog_of(*photos: Photo, rejected: dict[str, tuple[str, str]] | None = None) -> Catalog:
    return Catalog("file:///x", {p.photo_id: p for p in photos}, dict(rejected or {}))


def test_plan_sync_sorts_new_changed_payload_only_gone_and_unchanged() -> None:
    catalog = catalog_of(
        photo("same", "v1", "m1"),
        photo("changed", "v2", "m1"),
        photo("retitled", "v1", "m2"),
        photo("new", "v1"),
        rejected={"notes.txt": ("v1", "unsupported file type .txt")},
    )
    indexed = [
        IndexedVersion("same", "v1", "m1"),
        IndexedVersion("changed", "v1", "m1"),
        IndexedVersion("retitled", "v1", "m1"),
        IndexedVersion("deleted", "v1", ""),
    ]
    plan = plan_sync(catalog, indexed, {})
    assert sorted(p.photo_id for p in plan.embed) == ["changed", "new"]
    assert [p.photo_id for p in plan.payload_only] == ["retitled"]
    assert plan.gone == ["deleted"]
    assert plan.rejected == {"notes.txt": ("v1", "unsupported file type .txt")}
    assert (plan.new, plan.changed, plan.unchanged, plan.known_bad) == (1, 1, 1, 0)
    assert plan.forget == []


def test_known_bad_photos_are_not_retried_until_their_version_changes() -> None:
    skipped = {"broken": "v1", "notes.txt": "v1"}
    rejected = {"notes.txt": ("v1", "unsupported file type .txt")}
    plan = plan_sync(catalog_of(photo("broken", "v1"), rejected=rejected), [], skipped)
    assert (plan.embed, plan.rejected, plan.known_bad, plan.new) == ([], {}, 2, 0)
    rejected = {"notes.txt": ("v2", "unsupported file type .txt")}
    plan = plan_sync(catalog_of(photo("broken", "v2"), rejected=rejected), [], skipped)
    assert [p.photo_id for p in plan.embed] == ["broken"] and plan.new == 1
    assert plan.rejected == rejected and plan.known_bad == 0


def test_changed_file_known_bad_at_its_new_version_keeps_its_old_point() -> None:
    catalog = catalog_of(photo("a", "v2"))
    plan = plan_sync(catalog, [IndexedVersion("a", "v1", "")], {"a": "v2"})
    assert (plan.embed, plan.gone, plan.known_bad, plan.changed) == ([], [], 1, 0)


def test_skip_records_of_files_gone_from_the_source_are_forgotten() -> None:
    rejected = {"notes.txt": ("v1", "unsupported file type .txt")}
    catalog = catalog_of(photo("kept", "v1"), rejected=rejected)
    skipped = {"kept": "v1", "notes.txt": "v1", "vanished": "v3", "old.txt": "v1"}
    plan = plan_sync(catalog, [], skipped)
    assert sorted(plan.forget) == ["old.txt", "vanished"]
