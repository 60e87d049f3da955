"""The embedded worker takes back the tasks a killed predecessor held, and only those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
from celery.worker import state as worker_state
from redis import Redis

from core.taskqueue import COLLECTIONS, control_queue, embed_queue
from indexer.host import restore_orphaned
from photosearch.embedded import indexing_worker
from tests.support.api import serving
from tests.support.indexing import drop_keys, settings_for, tasks

# A consumer that takes one message without acknowledging it, then dies without closing
# its channel (a graceful close would give the message back by itself).
TAKE_AND_DIE = """
import os, sys
from kombu import Connection
with Connection(sys.argv[1], transport_options={"visibility_timeout": 3600}) as conn:
    channel = conn.channel()
    assert channel.basic_get(sys.argv[2], no_ack=False) is not None
    os._exit(9)
"""


def take_and_die(redis_url: str, queue: str) -> None:
    done = subprocess.run([sys.executable, "-c", TAKE_AND_DIE, redis_url, queue], timeout=30)
    assert done.returncode == 9


def test_unacked_tasks_of_our_queues_go_back_and_others_stay(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "127.0.0.1:1", tmp_path / "models")
    redis = Redis.from_url(settings.redis.url)
    other = f"{settings.redis.prefix}-someone-else"
    try:
        with tasks(settings).connection_for_write() as connection:
            for queue in (control_queue(settings), embed_queue(settings), other):
                producer = connection.Producer()
                producer.publish({"queue": queue}, routing_key=queue, declare=[])
        for queue in (control_queue(settings), embed_queue(settings), other):
            take_and_die(settings.redis.url, queue)
            assert redis.llen(queue) == 0
        held = len(redis.hgetall("unacked"))
        assert held >= 3

        restored = restore_orphaned(
            tasks(settings), [control_queue(settings), embed_queue(settings)]
        )

        assert restored == 2
        assert redis.llen(control_queue(settings)) == 1
        assert redis.llen(embed_queue(settings)) == 1
        assert redis.llen(other) == 0  # not ours: still held by whoever took it
        assert len(redis.hgetall("unacked")) == held - 2
    finally:
        for tag, raw in redis.hgetall("unacked").items():
            if other.encode() in raw:
                redis.hdel("unacked", tag)
                redis.zrem("unacked_index", tag)
        redis.delete(other)
        redis.close()
        drop_keys(settings)


def test_the_api_s_embedded_worker_consumes_the_queue_and_its_death_fails_liveness(
    tmp_path: Path,
) -> None:
    settings = settings_for(tmp_path / "data", "127.0.0.1:1", tmp_path / "models")
    try:
        with serving(settings, companions=[indexing_worker]) as api:
            assert httpx.get(api.url + "/healthz").json() == {"status": "ok"}
            # The API process answers a task from the real Redis queue: nothing is indexed.
            # (Celery marks a process running a worker as one that must not block on results.)
            answer = (
                tasks(settings).send_task(COLLECTIONS).get(timeout=30, disable_sync_subtasks=False)
            )
            assert answer == []
            worker = api.app.state.companions[0].worker
            worker_state.should_terminate = 0  # type: ignore[assignment]  # the worker stops
            worker.thread.join(30)
            worker_state.should_terminate = None
            health = httpx.get(api.url + "/healthz")
            assert health.status_code == 503
            assert health.json()["error"] == "the embedded indexing worker has stopped"
    finally:
        drop_keys(settings)
