"""The indexer's tasks as a worker's app binds them: each that changes a job retries a
dependency's failure a finite number of times, with backoff, and is acknowledged only once it
ran; a photo that cannot be read is never a reason to retry; beat's schedule."""

from __future__ import annotations

from core.embedding.errors import InvalidImage, TritonUnavailable
from core.settings import Settings
from core.settings_indexer import IndexerSettings
from core.sources import SourceError, SourceUnavailable
from core.taskqueue import EMBED_BATCH, FINALIZE, PLAN, REINDEX, SCHEDULED_POPULARITY
from core.vectorstore import StoreError
from indexer import tasks
from indexer.app import create_app, nightly
from indexer.failures import RETRYABLE


def test_the_job_tasks_retry_a_dependencys_failure_a_finite_number_of_times() -> None:
    app = create_app(Settings(indexer=IndexerSettings(max_retries=7)))
    for name in (PLAN, EMBED_BATCH, FINALIZE, REINDEX):
        task = app.tasks[name]
        declared = {option: getattr(task, option) for option in ("retry_backoff", "autoretry_for")}
        assert task.max_retries == 7, name
        assert declared["retry_backoff"], name
        assert set(declared["autoretry_for"]) == set(RETRYABLE), name
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost


def test_a_bad_photo_or_source_is_not_retried_and_an_outage_is() -> None:
    for outage in (TritonUnavailable, StoreError, SourceUnavailable):
        assert issubclass(outage, RETRYABLE), outage
    for refusal in (InvalidImage, SourceError):
        assert not issubclass(refusal, RETRYABLE), refusal


def test_beat_counts_popularity_daily_before_the_nightly_job_unless_unset() -> None:
    beat = create_app(Settings()).conf.beat_schedule
    assert beat["popularity"]["task"] == SCHEDULED_POPULARITY
    assert str(beat["popularity"]["schedule"]) == str(nightly("30 1 * * *"))
    assert SCHEDULED_POPULARITY in create_app(Settings()).tasks
    unset = Settings(indexer=IndexerSettings(popularity_cron=None))
    assert "popularity" not in create_app(unset).conf.beat_schedule


# The names the previous release's publishers sent: a message queued before an upgrade (a
# token, a job, the beat's) finds its task under the same name in the new worker.
PREVIOUS_TASK_NAMES = {
    *("indexer.plan", "indexer.embed_batch", "indexer.finalize", "indexer.sync"),
    *("indexer.increment", "indexer.reindex", "indexer.scheduled_sync"),
    *("indexer.scheduled_reconcile", "indexer.scheduled_popularity", "indexer.optimize"),
    *("indexer.rollback_job", "indexer.resume", "indexer.drop", "indexer.collections"),
    "indexer.evaluate",
}


def test_the_previous_releases_task_names_are_this_workers_tasks() -> None:
    app = create_app(Settings())
    ours = {name for name in app.tasks if name.startswith("indexer.")}
    assert ours == PREVIOUS_TASK_NAMES
    assert {app.tasks[name].run.__module__ for name in ours} == {tasks.__name__}
