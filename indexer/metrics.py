"""Prometheus metrics of an indexer worker: the photos and batches it did, the jobs that ended,
and the backlog of the queues, read from Redis at each scrape.

The backlog is what alerts and autoscaling need (KEDA reads the list length itself): a nightly
sync stuck behind a dead Triton shows as an ageing queue long before anyone reads a job record.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from functools import lru_cache

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from redis import Redis
from redis.exceptions import RedisError

from core.jobstatus import FINISHED, JobKind
from core.settings import Settings
from core.taskqueue import ENQUEUED_AT, control_queue, embed_queue, plan_queue

log = logging.getLogger(__name__)

_BATCH_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


def enqueued_at(message: bytes) -> float | None:
    """When a message in a kombu Redis list was published (None: not stamped, not ours)."""
    try:
        stamp = json.loads(message)["headers"][ENQUEUED_AT]
        return float(stamp)
    except (ValueError, KeyError, TypeError):
        return None


class QueueCollector(Collector):
    """Length and oldest-task age of the indexer's queues, read from Redis when scraped."""

    def __init__(self, settings: Settings) -> None:
        self.queues = {
            "control": control_queue(settings),
            "plan": plan_queue(settings),
            "embed": embed_queue(settings),
        }
        # redis-py connects on the first command (the first scrape), not here.
        self.redis = Redis.from_url(settings.redis.url, socket_timeout=2, socket_connect_timeout=2)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        length = GaugeMetricFamily(
            "photosearch_indexer_queue_length", "Tasks waiting in a queue.", labels=["queue"]
        )
        age = GaugeMetricFamily(
            "photosearch_indexer_oldest_task_age_seconds",
            "How long the oldest waiting task of a queue has waited (0 when empty).",
            labels=["queue"],
        )
        now = time.time()
        for label, key in self.queues.items():
            try:
                # kombu LPUSHes and BRPOPs: the oldest message is the list's last element.
                pipe = self.redis.pipeline(transaction=False)
                pipe.llen(key)
                pipe.lindex(key, -1)
                count, oldest = pipe.execute()
            except RedisError as exc:
                # No sample rather than a wrong 0: the target-down and dependency alerts speak.
                log.warning("queue metrics: Redis unavailable: %s", exc)
                continue
            length.add_metric([label], int(count))
            stamp = enqueued_at(oldest) if oldest is not None else None
            age.add_metric([label], max(0.0, now - stamp) if stamp is not None else 0.0)
        yield length
        yield age


class IndexerMetrics:
    """One registry per worker process; counters are incremented by the tasks. With settings,
    the queues' backlog is read from their Redis at each scrape."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.photos = Counter(
            "photosearch_indexer_photos_total",
            "Photos of embedding batches this worker finished: done, skipped (bad input), "
            "or failed (the batch's retries were spent).",
            ["result"],
            registry=r,
        )
        self.batch_seconds = Histogram(
            "photosearch_indexer_batch_duration_seconds",
            "Time to read, decode, embed and upsert one batch.",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.jobs_finished = Counter(
            "photosearch_indexer_jobs_finished_total",
            "Index jobs this worker finished, by kind and final state.",
            ["kind", "state"],
            registry=r,
        )
        # A batch's search costs what the collection's index allows: one made without an
        # index (a reindex's load) would scan a growing collection (indexer/jobs/regroup.py).
        self.duplicate_searches = Counter(
            "photosearch_indexer_duplicate_searches_total",
            "Batched nearest-neighbour requests of the near-duplicate grouping: before a "
            "batch's upsert (write), or by a reindex's grouping pass (pass).",
            ["by"],
            registry=r,
        )
        # Every series exists from the start at 0: increase() over a series that first appears
        # at 1 sees no increase, and the first failed job would raise no alert.
        for result in ("done", "skipped", "failed"):
            self.photos.labels(result)
        for by in ("write", "pass"):
            self.duplicate_searches.labels(by)
        for kind in JobKind:
            for state in FINISHED:
                self.jobs_finished.labels(kind.value, state.value)
        if settings is not None:
            self.watch_queues(settings)

    def watch_queues(self, settings: Settings) -> None:
        self.registry.register(QueueCollector(settings))

    def job_finished(self, kind: str, state: str) -> None:
        self.jobs_finished.labels(kind or "unknown", state).inc()


@lru_cache(maxsize=1)
def worker_metrics() -> IndexerMetrics:
    """The process's counters (one set, whatever the number of task threads)."""
    return IndexerMetrics()


def serve_metrics(settings: Settings) -> None:
    """Expose the worker's metrics and its queues' backlog on metrics_host:metrics_port."""
    metrics = worker_metrics()
    metrics.watch_queues(settings)
    indexer = settings.indexer
    try:
        start_http_server(
            indexer.metrics_port, addr=indexer.metrics_host, registry=metrics.registry
        )
    except OSError as exc:
        # Indexing matters more than its metrics: a taken port is logged, the worker goes on.
        log.error("worker metrics not served on :%s: %s", settings.indexer.metrics_port, exc)
