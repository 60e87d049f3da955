"""The Celery application: Redis broker and backend, named queues, routes, the nightly beat."""

from __future__ import annotations

import time
from typing import Any

from celery import Celery
from celery.schedules import crontab
from celery.signals import before_task_publish
from kombu import Queue

from core.settings import Settings, get_settings

# Celery's messages carry no time of sending; every publisher (API, beat, worker) imports this
# module, and stamps one, so the age of the oldest waiting task can be read off the queue.
ENQUEUED_AT = "photosearch_enqueued_at"


@before_task_publish.connect
def _stamp_enqueued_at(headers: dict[str, Any] | None = None, **_: object) -> None:
    if headers is not None:
        headers.setdefault(ENQUEUED_AT, time.time())


def control_queue(settings: Settings) -> str:
    """Short tasks that start jobs, switch and roll back: never stuck behind planning or
    embedding (in Kubernetes, a worker of its own consumes it)."""
    return f"{settings.redis.prefix}.control"


def plan_queue(settings: Settings) -> str:
    """Planning tokens: each plans one shard; as many run at once as workers take them."""
    return f"{settings.redis.prefix}.plan"


def embed_queue(settings: Settings) -> str:
    """Embedding tokens: each embeds one batch; at most max_queued_batches per job wait."""
    return f"{settings.redis.prefix}.embed"


def all_queues(settings: Settings) -> list[str]:
    return [control_queue(settings), plan_queue(settings), embed_queue(settings)]


def nightly(cron: str) -> crontab:
    """A five-field cron line as Celery's crontab."""
    fields = cron.split()
    if len(fields) != 5:
        raise ValueError(f"sync_cron {cron!r}: expected five fields (m h dom mon dow)")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    return crontab(minute, hour, day_of_week, day_of_month, month_of_year)


def schedule(settings: Settings) -> dict[str, dict[str, object]]:
    """The nightly job and, when a feed makes it an increment, the weekly full sync."""
    jobs: dict[str, dict[str, object]] = {
        "nightly-sync": {
            "task": "indexer.scheduled_sync",
            "schedule": nightly(settings.indexer.sync_cron),
        }
    }
    if settings.indexer.feed:
        jobs["reconciliation"] = {
            "task": "indexer.scheduled_reconcile",
            "schedule": nightly(settings.indexer.reconcile_cron),
        }
    return jobs


def configure(app: Celery, settings: Settings) -> Celery:
    """(Re)configure the app from settings; connections are made lazily, on first use."""
    control, plan, embed = all_queues(settings)
    if app.conf.broker_url not in (None, settings.redis.url):
        # The connection and producer pools are made once, for the broker of their time: left
        # alone, tasks sent after a switch would still go to the previous Redis.
        app._pool = None  # type: ignore[attr-defined]
        app.amqp._producer_pool = None  # type: ignore[attr-defined]
    visibility = settings.indexer.visibility_timeout_s
    transport = {
        "visibility_timeout": visibility,
        # The tasks of a worker that died go back to the queue when kombu sweeps its unacked
        # messages: by default every 10 s x 10 (its throttle), so 100 s after the visibility
        # timeout at worst. One sweep (a ZRANGE) every min(10 s, timeout) costs nothing.
        "unacked_restore_interval": max(1, min(10, visibility)),
        "unacked_restore_throttle": 1,
    }
    app.conf.update(
        broker_url=settings.redis.url,
        result_backend=settings.redis.url,
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        broker_connection_retry_on_startup=True,
        task_queues=[Queue(control), Queue(plan), Queue(embed)],
        task_default_queue=control,
        task_routes={"indexer.plan": {"queue": plan}, "indexer.embed_batch": {"queue": embed}},
        # A task is acknowledged when it has finished, so a worker that dies mid-batch leaves
        # it to be delivered again; one prefetched message per thread bounds what is held.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=7 * 86400,
        timezone="UTC",
        beat_schedule=schedule(settings),
    )
    return app


app = configure(Celery("photosearch", include=["indexer.tasks"]), get_settings())
