"""Photo sources (local, S3 via moto) listed by key range, originals read confined and bounded,
source URIs checked, and metadata manifests."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from core.embedding.images import ImageLimits
from core.embedding.manifest import ImagePreprocessing
from core.originals import (
    PhotoTooLarge,
    ReadLimits,
    ReadTimedOut,
    SourceError,
    SourceRefused,
    SourceUnavailable,
    check_source,
    read_bounded,
    read_file,
)
from core.settings import S3Settings, Settings
from core.sources.access import open_source, photo_root, read_photo
from core.sources.base import Source
from core.sources.local import LocalSource
from core.sources.s3 import S3Source, s3_errors
from harness.processes import free_ports
from indexer.photo.reader import read_photo as read_for_indexing
from indexer.plan.catalog import Photo
from indexer.plan.metadata import parse_manifest
from tests.support.indexing import write_photo

SETTINGS = Settings()
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
    for key in ("../x", "a/../../x", "/x", "./x", ""):
        with pytest.raises(SourceRefused, match="not a path inside the source"):
            source.read(key)
    with pytest.raises(FileNotFoundError):
        source.read("missing.jpg")
    with pytest.raises(FileNotFoundError):
        source.read("missing/a.jpg")


def test_open_source_takes_paths_and_file_uris_and_refuses_the_rest(tmp_path: Path) -> None:
    write_photo(tmp_path / "a.jpg", 0)
    for uri in (str(tmp_path), tmp_path.as_uri()):
        source = open_source(uri, SETTINGS)
        assert isinstance(source, LocalSource) and list(listing(source)) == ["a.jpg"]
    with pytest.raises(SourceRefused, match="unsupported scheme 'ftp'"):
        open_source("ftp://host/photos", SETTINGS)
    with pytest.raises(SourceRefused, match="names no host"):
        open_source("file://evil.example.com" + str(tmp_path), SETTINGS)
    with pytest.raises(SourceError, match="not a folder"):
        open_source(str(tmp_path / "missing"), SETTINGS)
    with pytest.raises(SourceError, match="no bucket"):
        open_source("s3:///prefix", SETTINGS)


# --- Originals confined: a regular file below its root, within a size and a deadline ----------


def settings_of(**groups: Any) -> Settings:
    return Settings(**groups)


def folder_with(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "photos"
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    root.mkdir(exist_ok=True)
    return root


def refused_everywhere(root: Path, key: str, match: str) -> None:
    """The indexer's read and the API's read of one key both refuse it, with the reason."""
    with pytest.raises(SourceRefused, match=match):
        LocalSource(root).read(key)
    with pytest.raises(SourceRefused, match=match):
        read_photo(root.as_uri(), (root / key).as_uri(), SETTINGS)


def test_a_photo_swapped_for_a_link_to_a_secret_is_refused_not_served(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"root:x:0:0")
    root = folder_with(tmp_path, {"a.jpg": b"photo"})
    assert read_photo(root.as_uri(), (root / "a.jpg").as_uri(), SETTINGS) == b"photo"
    (root / "a.jpg").unlink()
    (root / "a.jpg").symlink_to(tmp_path / "secret")
    refused_everywhere(root, "a.jpg", "symbolic link")
    (root / "b.jpg").symlink_to("/etc/passwd")
    refused_everywhere(root, "b.jpg", "symbolic link")


def test_links_inside_the_root_are_refused_too(tmp_path: Path) -> None:
    root = folder_with(tmp_path, {"real/b.jpg": b"b"})
    (root / "a.jpg").symlink_to(root / "real/b.jpg")
    (root / "linked").symlink_to(root / "real")
    refused_everywhere(root, "a.jpg", "symbolic link")
    refused_everywhere(root, "linked/b.jpg", "symbolic link")
    assert LocalSource(root).read("real/b.jpg") == b"b"


def test_a_link_swapped_in_after_the_path_check_is_refused_when_opened(tmp_path: Path) -> None:
    """The folders are opened one by one without following links: no window between a check of
    the path and the open lets a link through."""
    from core import originals

    root = folder_with(tmp_path, {"real/b.jpg": b"b"})
    (root / "linked").symlink_to(root / "real")
    (root / "c.jpg").symlink_to(root / "real/b.jpg")
    # What read_file does after its check of the path, as if the links came in between.
    for parts in (["linked", "b.jpg"], ["c.jpg"]):
        with pytest.raises(SourceRefused, match="symbolic link"):
            originals._open_below(str(root), parts)


@pytest.mark.timeout(60)  # only bounds the hang a blocking open would be
def test_a_fifo_where_a_photo_was_is_refused_at_once(tmp_path: Path) -> None:
    root = folder_with(tmp_path, {})
    os.mkfifo(root / "a.jpg")  # no writer: a blocking open or read would wait for ever
    refused_everywhere(root, "a.jpg", "a FIFO, not a regular file")


@pytest.mark.timeout(10)
def test_a_device_or_a_folder_is_refused_never_read(tmp_path: Path) -> None:
    root = folder_with(tmp_path, {"folder.jpg/x.jpg": b"x"})
    refused_everywhere(root, "folder.jpg", "a folder, not a regular file")
    (root / "zero.jpg").symlink_to("/dev/zero")  # endless: a read would never end
    refused_everywhere(root, "zero.jpg", "symbolic link")
    try:
        os.mknod(root / "dev.jpg", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's
    except PermissionError:  # not root: the link above stands for it
        return
    refused_everywhere(root, "dev.jpg", "a character device, not a regular file")


def test_a_file_above_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    root = folder_with(tmp_path, {"big.jpg": b"x" * 11, "fits.jpg": b"y" * 10})
    small = settings_of(images={"max_bytes": 10})
    with pytest.raises(PhotoTooLarge, match="file is 11 bytes, the limit is 10"):
        read_photo(root.as_uri(), (root / "big.jpg").as_uri(), small)
    with pytest.raises(PhotoTooLarge):
        open_source(str(root), small).read("big.jpg")
    assert read_photo(root.as_uri(), (root / "fits.jpg").as_uri(), small) == b"y" * 10


def test_a_file_growing_past_the_limit_while_read_is_cut_one_byte_past_it() -> None:
    asked: list[int] = []

    def endless(n: int) -> bytes:
        asked.append(n)
        return b"z" * n

    with pytest.raises(PhotoTooLarge, match="over 3000000 bytes"):
        read_bounded(endless, ReadLimits(max_bytes=3_000_000, timeout_s=30))
    assert sum(asked) == 3_000_001


def test_a_slow_read_ends_at_the_deadline_as_a_retryable_error() -> None:
    clock = [100.0]
    reads: list[int] = []

    def dribbling(n: int) -> bytes:
        """One byte per call, a quarter of a second each, never ending (a stalled network)."""
        reads.append(n)
        clock[0] += 0.25
        return b"."

    with pytest.raises(ReadTimedOut, match=r"longer than 1 s") as timed_out:
        read_bounded(dribbling, ReadLimits(max_bytes=1000, timeout_s=1), now=lambda: clock[0])
    # Read while the clock stood at 100, 100.25, ..., 101: not one read past the deadline.
    assert len(reads) == 5 and clock[0] == 101.25
    # The indexer retries OSErrors (a batch is tried again later); the API can answer 503.
    error = timed_out.value
    assert isinstance(error, SourceUnavailable) and isinstance(error, OSError)
    assert isinstance(error, TimeoutError) and not isinstance(error, SourceRefused)


def test_a_local_read_keeps_the_deadline_and_reads_whole_within_it(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # several chunks
    root = folder_with(tmp_path, {"day/big.jpg": data})
    assert read_file(root, "day/big.jpg", ReadLimits(timeout_s=30)) == data
    with pytest.raises(ReadTimedOut):
        read_file(root, "day/big.jpg", ReadLimits(timeout_s=1e-9))


def test_the_indexer_skips_a_refused_file_with_its_reason(tmp_path: Path) -> None:
    root = folder_with(tmp_path, {})
    os.mkfifo(root / "a.jpg")
    spec = ImagePreprocessing(size=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    why = read_for_indexing(LocalSource(root), Photo("a.jpg", "a.jpg", "v"), spec, ImageLimits())
    assert why == "a FIFO, not a regular file"


# --- Source URIs: one spelling, no host, under the allowed roots ------------------------------


def test_sources_are_normalized_to_one_spelling(tmp_path: Path) -> None:
    for given, normal in [
        ("/data/photos/", "file:///data/photos"),
        ("/data/x/../photos", "file:///data/photos"),
        ("//data//photos", "file:///data/photos"),
        ("/data/a b", "file:///data/a%20b"),
        ("file:///data/a%20b/", "file:///data/a%20b"),
        ("file://localhost/data", "file:///data"),  # RFC 8089: this machine
        ("FILE:/data", "file:///data"),
        ("s3://bucket/cat/", "s3://bucket/cat"),
        ("s3://bucket/", "s3://bucket"),
    ]:
        assert check_source(given, SETTINGS) == normal, given


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("file://evil.example.com/etc", "names no host"),
        ("file://127.0.0.1/etc", "names no host"),
        ("file://user@localhost/etc", "names no host"),
        ("photos", "a relative path"),
        ("./photos", "a relative path"),
        ("file:photos", "a relative path"),
        ("ftp://host/photos", "unsupported scheme 'ftp'"),
        ("http://host/photos", "unsupported scheme 'http'"),
        ("file:///data?x=1", "query or fragment"),
        ("file:///data#top", "query or fragment"),
        ("s3://bucket/cat?versionId=1", "query or fragment"),
        ("s3:///cat", "no bucket"),
        ("s3://user@bucket/cat", "not a bucket name"),
        ("s3://bucket/cat/../dog", "segment"),
        ("s3://[bucket/cat", "use a folder"),
        ("/data/\0x", "NUL"),
    ],
)
def test_sources_that_are_not_ours_are_refused_with_the_reason(uri: str, why: str) -> None:
    with pytest.raises(SourceRefused, match=why):
        check_source(uri, SETTINGS)


def test_allowed_roots_admit_their_own_trees_compared_by_whole_segments() -> None:
    settings = settings_of(sources={"allowed_roots": ("file:///data", "s3://bucket/cat")})
    for uri in (
        "/data",
        "file:///data/",
        "/data/photos/2024",
        "s3://bucket/cat",
        "s3://bucket/cat/x",
    ):
        assert check_source(uri, settings)
    for uri in (
        "/data2",
        "/dat",
        "/data/../etc",
        "/",
        "s3://bucket/cat2",
        "s3://bucket",
        "s3://other/cat",
        "file:///bucket/cat",
    ):
        with pytest.raises(SourceRefused, match="not under an allowed root"):
            check_source(uri, settings)
    broken = settings_of(sources={"allowed_roots": ("data",)})
    with pytest.raises(SourceRefused, match="ALLOWED_ROOTS"):
        check_source("/data", broken)


def test_a_source_linked_out_of_an_allowed_root_is_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    (allowed / "real").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/a.jpg").write_bytes(b"a")
    (allowed / "link").symlink_to(tmp_path / "outside")
    settings = settings_of(sources={"allowed_roots": (allowed.as_uri(),)})
    assert isinstance(open_source(str(allowed / "real"), settings), LocalSource)
    with pytest.raises(SourceRefused, match="not under an allowed root"):
        open_source(str(allowed / "link"), settings)
    with pytest.raises(SourceRefused, match="not under an allowed root"):
        read_photo((allowed / "link").as_uri(), (allowed / "link/a.jpg").as_uri(), settings)


# --- The API's read of a stored photo: below the root its point records ------------------------


def test_a_stored_photo_is_read_only_below_its_recorded_root(tmp_path: Path) -> None:
    root = folder_with(tmp_path, {"day/a.jpg": b"a"})
    (tmp_path / "other").mkdir()
    (tmp_path / "other/x.jpg").write_bytes(b"x")
    assert read_photo(root.as_uri(), (root / "day/a.jpg").as_uri(), SETTINGS) == b"a"
    assert read_photo(str(root), (root / "day/a.jpg").as_uri(), SETTINGS) == b"a"
    for photo in (
        (tmp_path / "other/x.jpg").as_uri(),
        root.as_uri() + "/../other/x.jpg",
        root.as_uri() + "/day/./a.jpg",
        root.as_uri(),
        "file://evil.example.com" + str(root / "day/a.jpg"),
        "s3://bucket" + str(root / "day/a.jpg"),
        (root / "day/a.jpg").as_uri() + "?x",
        "file://[::1",
    ):
        with pytest.raises(SourceRefused):
            read_photo(root.as_uri(), photo, SETTINGS)
    with pytest.raises(SourceRefused, match="names no host"):
        read_photo("file://evil.example.com" + str(root), (root / "day/a.jpg").as_uri(), SETTINGS)
    with pytest.raises(FileNotFoundError):
        read_photo(root.as_uri(), (root / "day/gone.jpg").as_uri(), SETTINGS)
    elsewhere = settings_of(sources={"allowed_roots": ((tmp_path / "other").as_uri(),)})
    with pytest.raises(SourceRefused, match="not under an allowed root"):
        read_photo(root.as_uri(), (root / "day/a.jpg").as_uri(), elsewhere)


def test_a_root_spelt_through_a_link_still_reads_the_real_paths_points_store(
    tmp_path: Path,
) -> None:
    root = folder_with(tmp_path, {"a.jpg": b"a"})
    (tmp_path / "alias").symlink_to(root)
    # Points store the real path (LocalSource resolves its root); the remembered source may not.
    assert read_photo(str(tmp_path / "alias"), (root / "a.jpg").as_uri(), SETTINGS) == b"a"
    with pytest.raises(SourceRefused, match="not a file of the source"):
        read_photo(str(root), (tmp_path / "alias/a.jpg").as_uri(), SETTINGS)


def test_the_root_of_a_point_is_its_own_else_the_remembered_source_else_none() -> None:
    assert photo_root({"source_root": "file:///a"}, "file:///b") == "file:///a"
    assert photo_root({"source_uri": "file:///b/x.jpg"}, "file:///b") == "file:///b"
    assert photo_root({"source_root": ""}, "file:///b") == "file:///b"
    with pytest.raises(SourceRefused, match="no source root"):
        photo_root({"source_uri": "file:///etc/passwd"}, None)


# --- S3Source against moto's server -----------------------------------------------------------


@dataclass
class S3:
    client: Any
    settings: Settings


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
        s3 = S3Settings(
            endpoint_url=endpoint,
            access_key_id="testing",
            secret_access_key="testing",
            region="us-east-1",
        )
        yield S3(client, Settings(s3=s3))
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


def test_s3_reads_are_confined_to_the_root_and_bounded(s3: S3) -> None:
    s3.client.put_object(Bucket="photos", Key="conf/a.jpg", Body=b"abcd")
    s3.client.put_object(Bucket="photos", Key="conf0/b.jpg", Body=b"b")
    root = "s3://photos/conf"
    assert read_photo(root, "s3://photos/conf/a.jpg", s3.settings) == b"abcd"
    for photo in ("s3://photos/conf0/b.jpg", "s3://other/conf/a.jpg", "s3://photos/conf/../a"):
        with pytest.raises(SourceRefused):
            read_photo(root, photo, s3.settings)
    small = Settings(s3=s3.settings.s3, images={"max_bytes": 3})
    with pytest.raises(PhotoTooLarge, match="file is 4 bytes, the limit is 3"):
        read_photo(root, "s3://photos/conf/a.jpg", small)
    source = closing_after(open_source(root, small))
    with pytest.raises(PhotoTooLarge):
        source.read("a.jpg")
    with pytest.raises(FileNotFoundError):
        read_photo(root, "s3://photos/conf/gone.jpg", s3.settings)


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
