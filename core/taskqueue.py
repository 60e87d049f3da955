"""The indexer's queues as every process sees them: the Celery app factory and the task names.

The API, beat, `up`, the CLI and the worker each make their Celery app here from a Settings;
publishers send tasks by name, so none of them imports the worker's modules.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Celery
from celery.signals import before_task_publish
from kombu import Queue

from core.settings import Settings

# Celery's messages carry no time of sending; every publisher stamps one, so the age of the
# oldest waiting task can be read off the queue.
ENQUEUED_AT = "photosearch_enqueued_at"

# The names the worker registers its tasks under (indexer/tasks.py), and publishers send.
SYNC = "indexer.sync"
INCREMENT = "indexer.increment"
REINDEX = "indexer.reindex"
RESUME = "indexer.resume"
ROLLBACK = "indexer.rollback_job"
PLAN = "indexer.plan"
EMBED_BATCH = "indexer.embed_batch"
FINALIZE = "indexer.finalize"
OPTIMIZE = "indexer.optimize"
DROP = "indexer.drop"
COLLECTIONS = "indexer.collections"
EVALUATE = "indexer.evaluate"
SCHEDULED_SYNC = "indexer.scheduled_sync"
SCHEDULED_RECONCILE = "indexer.scheduled_reconcile"
SCHEDULED_POPULARITY = "indexer.scheduled_popularity"


class TaskApp(Celery):
    """A Celery app that carries the Settings it was made from: tasks read them from here."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__("photosearch", **kwargs)
        self.settings = settings


def settings_of(app: Celery) -> Settings:
    """The Settings of an app made by `create_celery`."""
    if not isinstance(app, TaskApp):
        raise TypeError(f"{app!r} was not made by core.taskqueue.create_celery")
    return app.settings


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


def create_celery(settings: Settings) -> TaskApp:
    """A Celery app on the settings' Redis with the indexer's queues and routes; connections
    are made lazily, on first use. It is no process's current app: the worker's tasks are
    shared tasks (indexer/app.py registers them), and publishers send by name."""
    # Connected once however many apps are made: Celery keys receivers by identity.
    before_task_publish.connect(_stamp_enqueued_at, weak=False)
    app = TaskApp(settings, set_as_current=False)
    control, plan, embed = all_queues(settings)
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
        task_routes={PLAN: {"queue": plan}, EMBED_BATCH: {"queue": embed}},
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
    )
    return app


def send(app: Celery, name: str, *args: Any) -> None:
    """Send a task by name whose outcome goes into its job record (no result is kept)."""
    # Without ignore_result the Redis backend subscribes to every task's result channel.
    app.send_task(name, args=args, ignore_result=True)
