"""The worker's Celery application, made from a Settings: its tasks, retries and nightly beat."""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.schedules import crontab

import indexer.tasks  # noqa: F401  (registers the shared tasks with every app made here)
from core.settings import Settings
from core.taskqueue import (
    SCHEDULED_POPULARITY,
    SCHEDULED_RECONCILE,
    SCHEDULED_SYNC,
    TaskApp,
    create_celery,
)


def nightly(cron: str) -> crontab:
    """A five-field cron line as Celery's crontab."""
    fields = cron.split()
    if len(fields) != 5:
        raise ValueError(f"sync_cron {cron!r}: expected five fields (m h dom mon dow)")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    return crontab(minute, hour, day_of_week, day_of_month, month_of_year)


def schedule(settings: Settings) -> dict[str, dict[str, object]]:
    """The nightly job, the weekly full sync when a feed makes it an increment, and the
    daily count of each photo's popularity."""
    jobs: dict[str, dict[str, object]] = {
        "nightly-sync": {"task": SCHEDULED_SYNC, "schedule": nightly(settings.indexer.sync_cron)}
    }
    if settings.indexer.feed:
        jobs["reconciliation"] = {
            "task": SCHEDULED_RECONCILE,
            "schedule": nightly(settings.indexer.reconcile_cron),
        }
    if settings.indexer.popularity_cron:  # before the nightly job, which writes what changed
        jobs["popularity"] = {
            "task": SCHEDULED_POPULARITY,
            "schedule": nightly(settings.indexer.popularity_cron),
        }
    return jobs


class _Retries:
    """Celery annotations giving the indexer's tasks the settings' retry budget: applied as
    each task is bound to its app, so every app keeps the budget of its own settings."""

    def __init__(self, settings: Settings) -> None:
        self.options = {
            "max_retries": settings.indexer.max_retries,
            "retry_backoff_max": settings.indexer.retry_backoff_max_s,
        }

    def annotate(self, task: Task[Any, Any]) -> dict[str, int] | None:
        return self.options if task.name.startswith("indexer.") else None


def create_app(settings: Settings) -> TaskApp:
    """The worker's (and beat's) app: the shared queues, the indexer's tasks, the schedule."""
    app = create_celery(settings)
    app.conf.update(task_annotations=[_Retries(settings)], beat_schedule=schedule(settings))
    return app
