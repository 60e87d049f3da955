"""Photo sources (local, S3 via moto) listed by key range, and metadata manifests."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from indexer.metadata import parse_manifest
from photosearch.settings import S3Settings
from photosearch.sources import (
    LocalSource,
    S3Source,
    Source,
    SourceError,
    SourceUnavailable,
    open_source,
    s3_errors,
)
from tests.conftest import free_ports
from tests.indexing import write_photo

NO_S3 = S3Settings()
_OPEN: list[Source] = []


def closing_after(source: Source) -> Source:
    """A source this module closes when its tests end (an S3 client holds sockets)."""
    _OPEN.append(source)
    return source


@pytest.fixture(autouse=True, scope="module")
def _close_sources() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def listing(source: Source) -> dict[str, str]:
    return {obj.key: obj.version for obj in source.list_range()}


# --- LocalSource -----------------------------------------------------------------------------


def test_local_source_lists_nested_files_relative_to_root_without_hidden(tmp_path: Path) -> None:
    write_photo(tmp_path / "a.jpg", 0)
    write_photo(tmp_path / "day1" / "deep" / "b.png", 1)
    (tmp_path / ".hidden.jpg").write_bytes(b"x")
    write_photo(tmp_path / ".cache" / "c.jpg", 2)
    (tmp_path / "empty").mkdir()
    source = LocalSource(tmp_path)
    assert sorted(listing(source)) == ["a.jpg", "day1/deep/b.png"]
    obj = next(o for o in source.list_range() if o.key == "a.jpg")
    assert obj.size == (tmp_path / "a.jpg").stat().st_size
    assert source.read("day1/deep/b.png") == (tmp_path / "day1/deep/b.png").read_bytes()
    assert source.uri_of("a.jpg") == (tmp_path / "a.jpg").resolve().as_uri()


# Keys that sort in a way a folder walk must respect: "a.jpg" < "a/..." < "a0.jpg" ("." < "/"
# < "0"), a folder and a file of one name, and deep folders.
TRICKY = ["a.jpg", "a/b.jpg", "a/c/d.jpg", "a/c0.jpg", "a0.jpg", "b c/é.png", "b/x.jpg", "z.jpg"]


def keys_of(source: Source, lo: str = "", hi: str | None = None) -> list[str]:
    return [obj.key for obj in source.list_range(lo, hi)]


@pytest.fixture
def tricky_folder(tmp_path: Path) -> LocalSource:
    for key in TRICKY:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(key.encode())
    return LocalSource(tmp_path)


def test_local_listing_comes_in_key_order(tricky_folder: LocalSource) -> None:
    assert keys_of(tricky_folder) == sorted(TRICKY)


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        ("a/", "a0"),
        ("a/c", "b"),
        ("a.jpg", "a.jpg0"),
        ("a/b.jpg", None),
        ("", "a/c/d.jpg"),
        ("b", "z"),
        ("z.jpg", None),
        ("zz", None),
        ("a/c/d.jpg", "a/c/d.jpg"),
    ],
)
def test_local_listing_of_a_key_range_is_exactly_its_keys(
    tricky_folder: LocalSource, lo: str, hi: str | None
) -> None:
    expected = [k for k in sorted(TRICKY) if k >= lo and (hi is None or k < hi)]
    assert keys_of(tricky_folder, lo, hi) == expected


def test_local_stat_answers_for_listed_files_only(
    tricky_folder: LocalSource, tmp_path: Path
) -> None:
    obj = tricky_folder.stat("a/c/d.jpg")
    assert obj is not None and obj == next(tricky_folder.list_range("a/c/d.jpg", "a/c/d.jpg0"))
    (tmp_path / ".hidden.jpg").write_bytes(b"x")
    (tmp_path / "link.jpg").symlink_to(tmp_path / "z.jpg")
    for key in [
        "missing.jpg",
        "a",
        "a/",
        ".hidden.jpg",
        "link.jpg",
        "../x",
        "a/../z.jpg",
        "a/b.jpg/x",
    ]:
        assert tricky_folder.stat(key) is None, key
    assert tricky_folder.key_of(tricky_folder.uri_of("b c/é.png")) == "b c/é.png"
    assert tricky_folder.key_of("file:///elsewhere/x.jpg") is None


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
    source = closing_after(open_source("s3://photos/cat/", s3.settings))
    assert isinstance(source, S3Source)
    assert source.uri == "s3://photos/cat"
    found = {obj.key: obj for obj in source.list_range()}
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
    source = closing_after(open_source("s3://no-such-bucket/x", s3.settings))
    with pytest.raises(SourceError, match="cannot list") as refused:
        list(source.list_range())
    assert not isinstance(refused.value, SourceUnavailable)  # a refusal: not worth retrying


def test_s3_listing_of_a_key_range_starts_after_a_key_and_stops_at_the_end(s3: S3) -> None:
    for key in TRICKY:
        s3.client.put_object(Bucket="photos", Key=f"range/{key}", Body=key.encode())
    s3.client.put_object(Bucket="photos", Key="range0/outside.jpg", Body=b"x")
    source = closing_after(open_source("s3://photos/range", s3.settings))
    assert keys_of(source) == sorted(TRICKY)
    for lo, hi in [("a/", "a0"), ("a/c", "b"), ("a.jpg", "a/c"), ("b", None), ("zz", None)]:
        expected = [k for k in sorted(TRICKY) if k >= lo and (hi is None or k < hi)]
        assert keys_of(source, lo, hi) == expected, (lo, hi)
    assert source.stat("b c/é.png") == next(source.list_range("b c/é.png", "b c/é.png0"))
    assert source.stat("missing.jpg") is None and source.stat("a/") is None
    assert source.key_of("s3://photos/range/a/b.jpg") == "a/b.jpg"
    assert source.key_of("s3://photos/range0/outside.jpg") is None


def test_s3_errors_say_whether_to_retry() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    def client_error(status: int, code: str) -> ClientError:
        reply = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(reply, "ListObjectsV2")

    for final in (client_error(403, "AccessDenied"), client_error(404, "NoSuchBucket")):
        error = s3_errors("cannot list", final)
        assert isinstance(error, SourceError) and not isinstance(error, SourceUnavailable)
    for transient in (
        client_error(503, "SlowDown"),
        client_error(429, "TooManyRequests"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ):
        assert isinstance(s3_errors("cannot list", transient), SourceUnavailable)


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
