"""The nightly increment from a change feed, with no listing: S3's event notifications through
SQS (moto emulates both, notifications included) and a folder's journal of changed keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.jobs import JobKind, Jobs, JobStatus
from core.settings import Settings
from core.sources import LocalSource, open_source
from core.submit import queue_sync, submit_sync
from core.vectorstore import LIVE_ALIAS, IndexedPoint, open_store
from indexer.feed import journal_key, s3_event_keys
from loadtests.bench_scale import small_photo
from model.triton_server import TritonServer
from tests.support.indexing import WorkerProcess, indexer_settings, tasks, wait_job, write_photo
from tests.support.scale import Moto, moto_server

BUCKET = "photostock-feed"


@pytest.fixture
def moto() -> Iterator[Moto]:
    with moto_server() as server:
        yield server


def increment(settings: Settings, jobs: Jobs, source: str, worker: WorkerProcess) -> JobStatus:
    submitted = submit_sync(tasks(settings), jobs, source, JobKind.INCREMENT)
    assert not submitted.refused and not submitted.joined, submitted
    return wait_job(jobs, submitted.job_id, worker=worker)


def stored(settings: Settings) -> dict[str, IndexedPoint]:
    store = open_store(settings)
    try:
        return {p.key: p for p in store.points(store.resolve(LIVE_ALIAS))}
    finally:
        store.close()


def test_s3_events_are_indexed_by_the_next_increment_without_a_listing(
    moto: Moto, tmp_path: Path, triton: TritonServer, repository: Path
) -> None:
    queue_url = moto.bucket_with_events(BUCKET, "photo-events")
    s3 = moto.client("s3")
    for i in range(6):
        s3.put_object(Bucket=BUCKET, Key=f"cat/day{i % 2}/p{i}.jpg", Body=small_photo(i))
    source = f"s3://{BUCKET}/cat"
    with indexer_settings(tmp_path / "data", triton.url, repository) as settings:
        settings.s3 = moto.settings
        settings.indexer.feed = f"sqs+{queue_url}"
        jobs = Jobs.from_settings(settings)
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            first = wait_job(jobs, queue_sync(tasks(settings), jobs, source), worker=worker)
            assert (first.state, first.done) == ("done", 6), first
            # The feed still holds the events of those 6 puts: nothing left to do for them.
            drained = increment(settings, jobs, source, worker)
            assert (drained.state, drained.total, drained.unchanged) == ("done", 0, 6), drained
            old_etag = s3.head_object(Bucket=BUCKET, Key="cat/day0/p0.jpg")["ETag"].strip('"')

            s3.put_object(Bucket=BUCKET, Key="cat/new/a b.jpg", Body=small_photo(10))
            s3.put_object(Bucket=BUCKET, Key="cat/new/c.jpg", Body=small_photo(11))
            s3.put_object(Bucket=BUCKET, Key="cat/day0/p0.jpg", Body=small_photo(12))
            s3.delete_object(Bucket=BUCKET, Key="cat/day1/p1.jpg")
            s3.put_object(Bucket=BUCKET, Key="cat/notes.txt", Body=b"not a photo")
            s3.put_object(Bucket=BUCKET, Key="dog/d.jpg", Body=small_photo(13))  # elsewhere
            lists = moto.server.requests["ListObjectsV2"]
            heads = moto.server.requests["HeadObject"]
            job = increment(settings, jobs, source, worker)
            # Not one listing: each reported key was asked for its state (a HEAD) instead.
            assert moto.server.requests["ListObjectsV2"] == lists
            assert moto.server.requests["HeadObject"] - heads == 5
            assert (job.state, job.done, job.deleted, job.skipped) == ("done", 3, 1, 1), job
            assert (job.total, job.listed) == (4, 5), job
            assert "notes.txt: unsupported file type .txt" in jobs.problems(job.id)

            again = increment(settings, jobs, source, worker)  # the feed is empty now
            assert (again.state, again.total, again.listed) == ("done", 0, 0), again

            # 4 of the 7 photos deleted: past max_delete_share (0.5), the increment is refused
            # and deletes nothing; the feed gives the events back for the forced one.
            for key in ("day0/p2.jpg", "day0/p4.jpg", "day1/p3.jpg", "day1/p5.jpg"):
                s3.delete_object(Bucket=BUCKET, Key=f"cat/{key}")
            refused = increment(settings, jobs, source, worker)
            assert (refused.state, refused.refused, refused.deleted) == ("failed", True, 0)
            assert "photosearch index increment --force" in refused.message, refused
            forced = submit_sync(tasks(settings), jobs, source, JobKind.INCREMENT, force=True)
            job = wait_job(jobs, forced.job_id, worker=worker)
            assert (job.state, job.deleted, job.listed) == ("done", 4, 4), job
    after = stored(settings)
    bucket = open_source(source, settings)
    listed = {o.key: o.version for o in bucket.list_range()}
    bucket.close()
    listed.pop("notes.txt")
    assert {k: p.content_version for k, p in after.items()} == listed
    assert "day1/p1.jpg" not in after and "new/a b.jpg" in after
    # Overwritten: embedded again, under its new ETag (the listing's, above).
    assert after["day0/p0.jpg"].content_version != old_etag
    assert after["new/c.jpg"].shard == ""  # labelled with the shard its key falls in


def test_a_folder_journal_feeds_the_increment(
    tmp_path: Path, triton: TritonServer, repository: Path
) -> None:
    root = tmp_path / "photos"
    for i in range(20):
        write_photo(root / f"d{i % 4}/p{i:02d}.jpg", i)
    journal = tmp_path / "changes.log"
    with indexer_settings(tmp_path / "data", triton.url, repository) as settings:
        settings.indexer.feed = journal.as_uri()
        jobs = Jobs.from_settings(settings)
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            assert (
                wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker).done
                == 20
            )
            write_photo(root / "d9/new.jpg", 40)
            write_photo(root / "d0/p00.jpg", 41)
            (root / "d1/p01.jpg").unlink()
            lines = ["d9/new.jpg", json.dumps({"key": "d0/p00.jpg"}), "/d1/p01.jpg", ""]
            journal.write_text("\n".join(lines) + "\npartial-line-being-written")
            job = increment(settings, jobs, str(root), worker)
            assert (job.state, job.done, job.deleted, job.listed) == ("done", 2, 1, 3), job
            # The rest of the line arrives: read from where the last increment stopped.
            with journal.open("a") as out:
                out.write(".jpg\n")
            (root / "partial-line-being-written.jpg").write_bytes(small_photo(5))
            job = increment(settings, jobs, str(root), worker)
            assert (job.done, job.listed) == (1, 1), job
    after = stored(settings)
    assert set(after) == {o.key for o in LocalSource(root).list_range()}


def test_event_bodies_and_journal_lines_name_keys() -> None:
    record = {"s3": {"bucket": {"name": "b"}, "object": {"key": "pre/a+b%2Fc.jpg"}}}
    direct = json.dumps({"Records": [record]})
    assert list(s3_event_keys(direct, "b", "pre/")) == ["a b/c.jpg"]
    through_sns = json.dumps({"Type": "Notification", "Message": direct})
    assert list(s3_event_keys(through_sns, "b", "pre/")) == ["a b/c.jpg"]
    assert list(s3_event_keys(direct, "other-bucket", "pre/")) == []
    assert list(s3_event_keys(direct, "b", "elsewhere/")) == []
    assert list(s3_event_keys('{"Event": "s3:TestEvent"}', "b", "")) == []
    assert list(s3_event_keys("not json", "b", "")) == []
    assert journal_key(" /a/b.jpg \n") == "a/b.jpg"
    assert journal_key('{"key": "c.jpg"}') == "c.jpg"
    assert journal_key("\n") is None and journal_key("{broken") is None
