"""No stranded work: the queue's Redis SIGKILLed (and started again, its append-only file
fsynced always) while a sync's tasks are queued in the broker, fetched by a consumer that died,
or claimed and writing in a worker SIGKILLed with it, with a visibility timeout of a day: the
sync ends with every photo, each batch counted once, because a task whose holder is gone is
taken back after its lease, not after the visibility timeout. Each point is reached by polling
Redis for it. And a process SIGKILLed holding a job's finalize lock: the job finishes once the
lease has passed, not the 900 s the lock was held for before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from redis import Redis

from core.jobs import Jobs
from core.jobstatus import FINISHED, JobStatus
from core.settings import Settings
from core.submit import queue_sync
from core.taskqueue import control_queue, embed_queue, plan_queue
from core.vectorstore import LIVE_ALIAS, open_store
from indexer.queue.workqueue import WorkQueue
from model.triton_server import TritonServer
from tests.support.indexing import WorkerProcess, indexer_settings, photo_folder, tasks
from tests.support.redisserver import RedisServer
from tests.support.waiting import wait_until

PHOTOS = 60
DAY = 86_400

# A consumer that takes one message without acknowledging it, says its task's id, and dies
# without closing its channel: the message stays fetched (kombu's unacked hash) for a day.
FETCH_AND_DIE = """
import json, os, sys
from kombu import Connection
with Connection(sys.argv[1], transport_options={"visibility_timeout": 86400}) as conn:
    message = conn.channel().basic_get(sys.argv[2], no_ack=False)
    assert message is not None
    print(message.headers["id"], flush=True)
    os._exit(9)
"""


@pytest.fixture
def queue_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """The queue's Redis as `photosearch up`, compose and Kubernetes run it."""
    with RedisServer(tmp_path / "redis", persistent=True) as server:
        yield server


@pytest.fixture
def settings(
    tmp_path: Path, triton: TritonServer, repository: Path, queue_redis: RedisServer
) -> Iterator[Settings]:
    with indexer_settings(
        tmp_path / "data", triton.url, repository, max_retries=240, retry_backoff_max_s=2
    ) as settings:
        settings.redis.url = queue_redis.url
        settings.indexer.batch_size = 2
        settings.indexer.max_queued_batches = 4
        settings.indexer.visibility_timeout_s = DAY  # nothing is redelivered by the broker
        settings.indexer.lease_s = 2.0
        yield settings


def restart(queue_redis: RedisServer) -> None:
    queue_redis.stop()  # SIGKILL
    queue_redis.start()


def wait_supervised(settings: Settings, job_id: str, worker: WorkerProcess) -> JobStatus:
    """Until the job has finished, starting the worker again whenever it exits (as compose's
    restart policy, Kubernetes and `photosearch up` do: kombu's reconnect sometimes fails)."""
    jobs = Jobs.from_settings(settings)

    def finished() -> JobStatus | None:
        job = jobs.get(job_id)
        if job is not None and job.state in FINISHED:
            return job
        if worker.process is None or worker.process.poll() is not None:
            worker.start()
        return None

    return wait_until(finished, 300, lambda: f"{jobs.get(job_id)}\n{worker.tail()}")


def assert_every_photo_once(settings: Settings, job: JobStatus, keys: Iterable[str]) -> None:
    assert (job.state, job.done, job.failed, job.total) == ("done", PHOTOS, 0, PHOTOS), job
    assert job.batches_done == job.batches_total == PHOTOS // 2, job  # each batch counted once
    store = open_store(settings)
    try:
        collection = store.resolve(LIVE_ALIAS)
        ids = [v.photo_id for v in store.points(collection)]
        assert len(ids) == len(set(ids)) == PHOTOS
        assert set(ids) == set(keys)
    finally:
        store.close()


def waiting(settings: Settings, condition: Callable[[Redis], object], what: str) -> object:
    redis = Redis.from_url(settings.redis.url)
    try:
        return wait_until(lambda: condition(redis), 120, lambda: what, every_s=0.005)
    finally:
        redis.close()


def test_tokens_queued_in_the_broker_survive_the_kill_and_the_sync_ends(
    settings: Settings, tmp_path: Path, queue_redis: RedisServer
) -> None:
    root = tmp_path / "photos"
    keys = photo_folder(root, PHOTOS)
    log = tmp_path / "worker.log"
    # A worker that only plans: the embed tokens wait in the broker's list.
    planner = WorkerProcess(
        settings, log, concurrency=1, queues=[control_queue(settings), plan_queue(settings)]
    ).start()
    job_id = queue_sync(tasks(settings), Jobs.from_settings(settings), str(root))
    queue = embed_queue(settings)
    waiting(settings, lambda r: r.llen(queue) >= 1, "embed tokens queued")
    restart(queue_redis)
    planner.kill()
    assert Redis.from_url(settings.redis.url).llen(queue) >= 1  # the append-only file kept them
    worker = WorkerProcess(settings, log, concurrency=2)
    job = wait_supervised(settings, job_id, worker)
    worker.stop()
    assert_every_photo_once(settings, job, keys)


def test_a_token_fetched_by_a_consumer_that_died_is_not_waited_for(
    settings: Settings, tmp_path: Path, queue_redis: RedisServer
) -> None:
    root = tmp_path / "photos"
    keys = photo_folder(root, PHOTOS)
    log = tmp_path / "worker.log"
    planner = WorkerProcess(
        settings, log, concurrency=1, queues=[control_queue(settings), plan_queue(settings)]
    ).start()
    job_id = queue_sync(tasks(settings), Jobs.from_settings(settings), str(root))
    queue = embed_queue(settings)
    waiting(settings, lambda r: r.llen(queue) >= 1, "embed tokens queued")
    fetched = subprocess.run(
        [sys.executable, "-c", FETCH_AND_DIE, settings.redis.url, queue],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fetched.returncode == 9, fetched.stderr
    token = fetched.stdout.strip()
    restart(queue_redis)
    planner.kill()
    redis = Redis.from_url(settings.redis.url)
    unacked = [json.loads(v)[0]["headers"]["id"] for v in redis.hvals("unacked")]
    assert token in unacked  # fetched, never claimed: the broker holds it for a day
    worker = WorkerProcess(settings, log, concurrency=2)
    job = wait_supervised(settings, job_id, worker)
    worker.stop()
    assert_every_photo_once(settings, job, keys)
    assert token in [json.loads(v)[0]["headers"]["id"] for v in redis.hvals("unacked")]


def test_tasks_claimed_and_writing_in_a_worker_killed_with_the_redis_are_taken_back(
    settings: Settings, tmp_path: Path, queue_redis: RedisServer
) -> None:
    root = tmp_path / "photos"
    keys = photo_folder(root, PHOTOS)
    log = tmp_path / "worker.log"
    first = WorkerProcess(settings, log, concurrency=2).start()
    jobs = Jobs.from_settings(settings)
    job_id = queue_sync(tasks(settings), jobs, str(root))
    claims = WorkQueue(jobs.redis, settings.redis.prefix).keys(job_id)[6]

    def claimed_after_writes(redis: Redis) -> bool:
        job = jobs.get(job_id)
        return job is not None and job.done >= 4 and redis.hlen(claims) >= 1

    waiting(settings, claimed_after_writes, "batches claimed after some were written")
    first.kill()  # SIGKILL: its claims are held by no one now
    restart(queue_redis)
    held = Redis.from_url(settings.redis.url).hlen(claims)
    assert held >= 1  # the append-only file kept the dead worker's claims
    worker = WorkerProcess(settings, log, concurrency=2)
    job = wait_supervised(settings, job_id, worker)
    worker.stop()
    assert_every_photo_once(settings, job, keys)


# A process that takes a job's finalize lock as `finalize` does, says so, and waits to be
# SIGKILLed holding it: a worker killed inside `finalize`.
HOLD_FINALIZE = """
import sys, threading
from redis import Redis
from indexer.leases import LeasedLock
lock = LeasedLock(Redis.from_url(sys.argv[1]), sys.argv[2], lease_s=float(sys.argv[3]))
assert lock.acquire(blocking=False)
print("held", flush=True)
threading.Event().wait()
"""


def test_a_worker_killed_inside_finalize_leaves_a_lock_that_ends_with_its_lease(
    settings: Settings, tmp_path: Path
) -> None:
    keys = photo_folder(tmp_path / "photos", PHOTOS)
    settings.indexer.lease_s = 20.0  # longer than a worker takes to start: it meets the lock
    log = tmp_path / "worker.log"
    jobs = Jobs.from_settings(settings)
    work = WorkQueue(jobs.redis, settings.redis.prefix)
    job_id = queue_sync(tasks(settings), jobs, str(tmp_path / "photos"))

    def started() -> bool:
        job = jobs.get(job_id)
        return job is not None and job.shards_total > 0

    # The job's start is a control task: a worker of the control queue alone starts it.
    with WorkerProcess(settings, tmp_path / "control.log", queues=[control_queue(settings)]):
        wait_until(started, 120, "the sync started")
    # A worker without the control queue plans and embeds the whole round: the finalize the
    # round's end sends waits in the control queue.
    with WorkerProcess(settings, log, queues=[plan_queue(settings), embed_queue(settings)]) as w:
        wait_until(
            lambda: work.round_done(job_id, 0), 300, lambda: f"{jobs.get(job_id)}\n{w.tail()}"
        )
    lock = f"{settings.redis.prefix}:job:{job_id}:finalize"
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_FINALIZE, settings.redis.url, lock, "20"],
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.kill()  # SIGKILL inside finalize
    assert 0 < jobs.redis.pttl(lock) <= 20_000  # the dead owner's lock lasts one lease, not 900 s
    with WorkerProcess(settings, log, concurrency=1) as worker:
        met = jobs.redis.exists(lock)
        job = wait_supervised(settings, job_id, worker)
    assert met  # its finalize found the step taken: a later nudge took it once the lease ended
    assert_every_photo_once(settings, job, keys)
