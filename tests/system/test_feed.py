"""The nightly increment from a change feed, with no listing: S3's event notifications through
SQS (moto emulates both, notifications included) and a folder's journal of changed keys; and
the weekly full sync beside it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from core.jobs import Jobs
from core.jobstatus import JobKind, JobStatus
from core.settings import Settings
from core.sources import LocalSource, S3Source, open_source
from core.submit import Submitted, queue_sync, submit_sync
from core.taskqueue import SCHEDULED_RECONCILE, control_queue
from core.vectorstore import LIVE_ALIAS, IndexedPoint, open_store
from harness.photos import small_photo
from indexer.plan.feed import Feed, journal_key, open_feed, s3_event_keys
from model.triton_server import TritonServer
from tests.support.indexing import WorkerProcess, indexer_settings, tasks, wait_job, write_photo
from tests.support.scale import Moto, moto_server

BUCKET = "photostock-feed"
# A day in ms: how much later than moto recorded them the test says some messages were sent.
DAY_MS = 86_400_000


@pytest.fixture
def moto() -> Iterator[Moto]:
    with moto_server() as server:
        yield server


def increment(settings: Settings, jobs: Jobs, source: str, worker: WorkerProcess) -> JobStatus:
    submitted = submit_sync(tasks(settings), jobs, source, JobKind.INCREMENT)
    assert not submitted.refused and not submitted.joined, submitted
    return wait_job(jobs, submitted.job_id, worker=worker)


def s3_event(key: str) -> str:
    """The body of the notification S3 sends to the queue when `key` is put."""
    s3 = {"bucket": {"name": BUCKET}, "object": {"key": key}}
    return json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": s3}]})


def key_of(message: Any) -> str:
    """The key (below cat/) a message of moto's queue names; "" for another event."""
    return next(s3_event_keys(message.body, BUCKET, "cat/"), "")


def unordered(moto: Moto, queue_url: str, later: set[str]) -> None:
    """The queue as a standard queue may deliver it: the messages of the keys in `later`, sent
    a day after the others (after the increment begins), come first."""
    messages = moto.queued(queue_url)
    for message in messages:
        if key_of(message) in later:
            message.sent_timestamp += DAY_MS
    messages.sort(key=lambda m: key_of(m) not in later)


def drain(sqs: Any, queue_url: str) -> list[str]:
    """The keys of every message the queue holds visible now (received, left invisible)."""
    keys = []
    while messages := sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
    ).get("Messages"):
        keys += [key for m in messages for key in s3_event_keys(m["Body"], BUCKET, "cat/")]
    return keys


class Ticks:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1
        return self.t


def read_as_an_increment(feed: Feed, redis: Redis, limit: int, until: float) -> list[list[str]]:
    """The keys of each chunk, read as an increment's planning steps read them: one step after
    another while the feed has more, each chunk's marks committed before it is acknowledged."""
    chunks = []
    for _ in range(100):
        chunk = feed.read(limit, until)
        for name, (value, ttl_s) in chunk.marks.items():
            redis.set(name, value, ex=ttl_s or None)
        chunk.ack()
        chunks.append(chunk.keys)
        if not chunk.more:
            return chunks
    raise AssertionError(f"the feed still had more after 100 reads: {chunks}")


@pytest.mark.parametrize(
    ("limit", "read_s"), [(4, 1e9), (1000, 2.5)], ids=["count budget", "time budget"]
)
def test_reads_of_an_unordered_queue_take_all_sent_before_the_increment_and_leave_the_rest(
    moto: Moto, redis_url: str, limit: int, read_s: float
) -> None:
    sqs = moto.client("sqs")
    queue_url: str = sqs.create_queue(QueueName="unordered")["QueueUrl"]
    older = [f"old/o{i}.jpg" for i in range(10)]
    newer = [f"new/n{i}.jpg" for i in range(15)]
    for key in older + newer:
        sqs.send_message(QueueUrl=queue_url, MessageBody=s3_event(f"cat/{key}"))
    until = max(m.sent_timestamp for m in moto.queued(queue_url)) / 1000
    unordered(moto, queue_url, set(newer))
    # A receive takes at most 10: the first answers only messages sent after `until`.
    assert [key_of(m) for m in moto.queued(queue_url)][:10] == newer[:10]
    redis = Redis.from_url(redis_url)
    prefix = f"pstest-{uuid.uuid4().hex[:8]}"
    source = S3Source(BUCKET, "cat", moto.settings)
    # With the time budget, each read receives twice by the clock (it moves a second a call).
    feed = open_feed(
        f"sqs+{queue_url}", source, moto.settings, redis, prefix, 3600, read_s, now=Ticks()
    )
    try:
        chunks = read_as_an_increment(feed, redis, limit, until)
    finally:
        feed.close()
        source.close()
        for mark in redis.scan_iter(f"{prefix}:*"):
            redis.delete(mark)
        redis.close()
    assert sorted(key for chunk in chunks for key in chunk) == sorted(older), chunks
    assert len(chunks) > 1 and all(len(chunk) <= limit for chunk in chunks), chunks
    # Given back as each read ended, not held for the hour: the next increment takes them.
    assert sorted(drain(sqs, queue_url)) == sorted(newer)


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


def test_an_increment_takes_every_event_sent_before_it_from_an_unordered_queue(
    moto: Moto, tmp_path: Path, triton: TritonServer, repository: Path
) -> None:
    queue_url = moto.bucket_with_events(BUCKET, "photo-events")
    s3 = moto.client("s3")
    for i in range(3):
        s3.put_object(Bucket=BUCKET, Key=f"cat/base/p{i}.jpg", Body=small_photo(i))
    source = f"s3://{BUCKET}/cat"
    with indexer_settings(tmp_path / "data", triton.url, repository, feed_chunk=2) as settings:
        settings.s3 = moto.settings
        settings.indexer.feed = f"sqs+{queue_url}"
        jobs = Jobs.from_settings(settings)
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            first = wait_job(jobs, queue_sync(tasks(settings), jobs, source), worker=worker)
            assert (first.state, first.done) == ("done", 3), first
            older = [f"day/o{i}.jpg" for i in range(5)]
            newer = [f"night/n{i}.jpg" for i in range(12)]
            for i, key in enumerate(older + newer):
                s3.put_object(Bucket=BUCKET, Key=f"cat/{key}", Body=small_photo(10 + i))
            unordered(moto, queue_url, set(newer))
            job = increment(settings, jobs, source, worker)
            # Every event sent before it, in chunks of 2 keys (the 3 first puts' too).
            assert (job.state, job.done, job.unchanged, job.listed) == ("done", 5, 3, 8), job
    assert set(stored(settings)) == {f"base/p{i}.jpg" for i in range(3)} | set(older)
    # The events sent after it began are still in the queue, for the next increment.
    assert sorted(drain(moto.client("sqs"), queue_url)) == sorted(newer)


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


def test_the_weekly_sync_waits_for_a_running_increment_and_runs_after_it(
    tmp_path: Path, triton: TritonServer, repository: Path
) -> None:
    root = tmp_path / "photos"
    for i in range(6):
        write_photo(root / f"d{i % 2}/p{i}.jpg", i)
    journal = tmp_path / "changes.log"
    with indexer_settings(tmp_path / "data", triton.url, repository) as settings:
        settings.indexer.feed = journal.as_uri()
        jobs = Jobs.from_settings(settings)
        app = tasks(settings)
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            first = wait_job(jobs, queue_sync(app, jobs, str(root)), worker=worker)
            assert (first.state, first.done) == ("done", 6), first
        write_photo(root / "d0/told.jpg", 20)
        journal.write_text("d0/told.jpg\n")
        write_photo(root / "d1/missed.jpg", 21)  # no event of it: the weekly sync finds it
        nightly = submit_sync(app, jobs, str(root), JobKind.INCREMENT).job_id
        app.send_task(SCHEDULED_RECONCILE)
        # A worker of the control queue only: the increment starts and its planning waits for
        # a worker of the plan queue, so it still runs when beat's weekly sync comes.
        control = WorkerProcess(
            settings, tmp_path / "control.log", queues=[control_queue(settings)], name="control"
        )
        with control:
            wait_job(jobs, nightly, worker=control, until=lambda job: job.state == "running")
            # Its task returns the job that answers it: refused, the one holding the lock.
            logged = control.wait_logged(rf"{SCHEDULED_RECONCILE}\[.+\] succeeded .*'(\w+)'")
        queued = jobs.get(logged.group(1))
        assert queued is not None and (queued.kind, queued.state) == ("sync", "queued"), queued
        assert queued.message.startswith(f"waits for increment job {nightly}"), queued
        weekly = queued.id
        # Beat's retry joins it in line; an operator's sync (no waiting) is refused as before.
        assert submit_sync(app, jobs, queued.source, wait=True) == Submitted(weekly, joined=True)
        assert submit_sync(app, jobs, queued.source).refused.startswith("increment job")
        with WorkerProcess(settings, tmp_path / "worker.log") as worker:
            increment = wait_job(jobs, nightly, worker=worker)
            sync = wait_job(jobs, weekly, worker=worker)
    assert (increment.state, increment.done, increment.listed) == ("done", 1, 1), increment
    assert (sync.state, sync.done, sync.unchanged, sync.message) == ("done", 1, 7, ""), sync
    assert sync.started_at >= increment.finished_at
    assert set(stored(settings)) == {o.key for o in LocalSource(root).list_range()}


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
