"""The indexer worker's Prometheus metrics: photos and jobs counted, the queues' backlog."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from celery import Celery
from redis import Redis

from core.jobs import Jobs
from core.settings import Settings
from core.taskqueue import ENQUEUED_AT, create_celery, embed_queue
from harness.processes import free_ports
from indexer.metrics import IndexerMetrics, enqueued_at
from model.triton_server import TritonServer
from tests.support.api import sample
from tests.support.indexing import (
    WorkerProcess,
    drop_keys,
    photo_folder,
    settings_for,
    tasks,
    wait_job,
)


@pytest.fixture
def settings(tmp_path: Path, triton: TritonServer, repository: Path) -> Iterator[Settings]:
    port = free_ports(1)[0]
    settings = settings_for(tmp_path / "data", triton.url, repository, metrics_port=port)
    yield settings
    drop_keys(settings)


def publisher(settings: Settings) -> Celery:
    """A Celery app of the test's queues that only sends (no worker consumes here)."""
    return create_celery(settings)


def families(metrics: IndexerMetrics) -> dict[str, dict[str, float]]:
    """name -> {queue label: value} of the collected gauge families."""
    out: dict[str, dict[str, float]] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            out.setdefault(s.name, {})[s.labels.get("queue", "")] = s.value
    return out


def test_every_counter_series_exists_at_zero_before_anything_happens() -> None:
    # So increase() sees the first failed job: a series born at 1 shows no increase.
    registry = IndexerMetrics().registry
    for kind in ("sync", "reindex", "rollback"):
        for state in ("done", "failed"):
            labels = {"kind": kind, "state": state}
            value = registry.get_sample_value("photosearch_indexer_jobs_finished_total", labels)
            assert value == 0, labels
    for result in ("done", "skipped", "failed"):
        value = registry.get_sample_value("photosearch_indexer_photos_total", {"result": result})
        assert value == 0, result


def test_queue_length_and_the_oldest_tasks_age_are_read_from_redis(settings: Settings) -> None:
    metrics = IndexerMetrics(settings)
    empty = families(metrics)
    assert empty["photosearch_indexer_queue_length"] == {"control": 0, "plan": 0, "embed": 0}
    idle = {"control": 0, "plan": 0, "embed": 0}
    assert empty["photosearch_indexer_oldest_task_age_seconds"] == idle

    app = publisher(settings)
    # Sent 1000, 500 and 10 s ago, as their stamps say (a stamp given is kept): the test
    # need not wait for a message to age.
    sent = time.time()
    for n, ago in enumerate((1000, 500, 10)):
        app.send_task("indexer.embed_batch", args=[f"job{n}"], headers={ENQUEUED_AT: sent - ago})
    app.send_task("indexer.embed_batch", args=["stamped on its way"])
    seen = families(metrics)
    assert seen["photosearch_indexer_queue_length"] == {"control": 0, "plan": 0, "embed": 4}
    # The first message waits longest: the age is its age, not a newer one's (the bound
    # above only bounds a hung test).
    age = seen["photosearch_indexer_oldest_task_age_seconds"]["embed"]
    assert 1000 <= age < 1500, age
    queue = Redis.from_url(settings.redis.url)
    oldest = queue.lindex(embed_queue(settings), -1)
    assert isinstance(oldest, bytes) and enqueued_at(oldest) == sent - 1000
    # One sent now is stamped on its way, by the clock of the process that sent it.
    raw = queue.lindex(embed_queue(settings), 0)
    assert isinstance(raw, bytes) and ENQUEUED_AT.encode() in raw
    assert sent <= (enqueued_at(raw) or 0) <= time.time()
    queue.close()


def test_an_unstamped_or_foreign_message_gives_no_age() -> None:
    assert enqueued_at(b'{"headers": {"task": "x"}}') is None
    assert enqueued_at(b"not json") is None
    assert enqueued_at(b'{"headers": {"photosearch_enqueued_at": 12.5}}') == 12.5


def test_a_worker_serves_photo_batch_and_job_counts(settings: Settings, tmp_path: Path) -> None:
    from core.submit import queue_sync

    root = tmp_path / "photos"
    photo_folder(root, 6)
    (root / "bad").mkdir()
    (root / "bad" / "zero.jpg").write_bytes(b"")
    jobs = Jobs.from_settings(settings)
    url = f"http://127.0.0.1:{settings.indexer.metrics_port}/metrics"
    with WorkerProcess(settings, tmp_path / "worker.log") as worker:
        job_id = queue_sync(tasks(settings), jobs, str(root))
        job = wait_job(jobs, job_id, worker=worker)
        assert (job.state, job.done, job.skipped) == ("done", 6, 1), job
        text = httpx.get(url, timeout=5).text
        assert sample(text, "photosearch_indexer_photos_total", result="done") == 6
        assert sample(text, "photosearch_indexer_photos_total", result="skipped") == 1
        assert sample(text, "photosearch_indexer_photos_total", result="failed") == 0
        # 7 photos in batches of 4: two batches timed.
        assert sample(text, "photosearch_indexer_batch_duration_seconds_count") == 2
        finished = "photosearch_indexer_jobs_finished_total"
        assert sample(text, finished, kind="sync", state="done") == 1
        assert sample(text, finished, state="failed") == 0
        assert sample(text, "photosearch_indexer_queue_length", queue="embed") == 0
