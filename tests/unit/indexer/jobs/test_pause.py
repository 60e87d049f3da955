"""A job through a dependency's outage: paused, not failed; on again, with how long it waited,
once its dependencies answer. The clock and Triton's readiness are the test's."""

from __future__ import annotations

import pytest

from core.embedding.errors import TritonUnavailable
from core.jobstatus import JobKind, JobState
from core.vectorstore import LIVE_ALIAS, StoreError, VectorStore
from indexer.jobs.pause import go_on, pause
from indexer.queue.records import JobRecords
from tests.unit.indexer.conftest import COLLECTION


def reindex(records: JobRecords) -> str:
    job_id = records.jobs.create(JobKind.REINDEX)
    records.jobs.start(job_id, state=JobState.RUNNING, collection=COLLECTION, model_version=1)
    return job_id


def test_a_reindex_pauses_on_an_outage(records: JobRecords) -> None:
    job_id = reindex(records)
    assert pause(records.jobs, job_id, TritonUnavailable("connection refused"), now=lambda: 100.0)
    job = records.jobs.get(job_id)
    assert job is not None
    assert (job.state, job.resume_state, job.paused_at) == (JobState.PAUSED, "running", 100.0)
    assert job.message.startswith("paused: Triton did not answer past the retry budget")


@pytest.mark.parametrize("kind", [JobKind.SYNC, JobKind.INCREMENT])
def test_a_sync_or_increment_pauses_on_an_outage_and_a_finished_job_does_not(
    records: JobRecords, kind: JobKind
) -> None:
    job_id = records.jobs.create(kind)
    records.jobs.start(job_id, state=JobState.RUNNING, collection=COLLECTION, model_version=1)
    assert pause(records.jobs, job_id, StoreError("down"), now=lambda: 50.0)
    job = records.jobs.get(job_id)
    assert job is not None
    assert (job.state, job.resume_state, job.paused_at) == (JobState.PAUSED, "running", 50.0)
    assert job.message.startswith("paused: the vector store did not answer")
    records.jobs.finish(job_id, JobState.DONE)
    assert not pause(records.jobs, job_id, StoreError("down"))


def test_a_sync_paused_in_its_first_task_goes_on_queued_with_the_live_model(
    records: JobRecords, store: VectorStore
) -> None:
    job_id = records.jobs.create(JobKind.SYNC)  # queued: its listing never began
    assert pause(records.jobs, job_id, TritonUnavailable("down"), first_step=True)
    paused = records.jobs.get(job_id)
    assert paused is not None and (paused.state, paused.resume_state) == ("paused", "queued")
    # No collection and no model version of its own yet: Triton is asked for the live one's.
    store.set_aliases({LIVE_ALIAS: COLLECTION})
    asked: list[int] = []

    def not_ready(version: int) -> bool:
        asked.append(version)
        return False

    assert not go_on(paused, jobs=records.jobs, ready=not_ready, store=store)
    assert asked == [1]
    assert go_on(paused, jobs=records.jobs, ready=lambda _: True, store=store)
    job = records.jobs.get(job_id)
    assert job is not None and job.state == JobState.QUEUED, job


def test_a_paused_job_goes_on_only_once_its_dependencies_answer(
    records: JobRecords, store: VectorStore
) -> None:
    job_id = reindex(records)
    pause(records.jobs, job_id, TritonUnavailable("down"), now=lambda: 100.0)
    paused = records.jobs.get(job_id)
    assert paused is not None
    assert not go_on(paused, jobs=records.jobs, ready=lambda _: False, store=store)
    assert go_on(paused, jobs=records.jobs, ready=lambda _: True, store=store, now=lambda: 700.0)
    job = records.jobs.get(job_id)
    assert job is not None
    assert (job.state, job.message) == (JobState.RUNNING, "went on after a pause of 600 s")
    assert records.jobs.problems(job_id)[0].startswith("paused 600 s: paused: Triton")
