"""A long job through a dependency's outage: paused, not failed; on again, with how long it
waited, once its dependencies answer. The clock and Triton's readiness are the test's."""

from __future__ import annotations

from core.embedding.errors import TritonUnavailable
from core.jobstatus import JobKind, JobState
from core.vectorstore import StoreError, VectorStore
from indexer.jobs.pause import go_on, pause
from indexer.queue.records import JobRecords
from tests.unit.indexer.conftest import COLLECTION


def reindex(records: JobRecords) -> str:
    job_id = records.jobs.create(JobKind.REINDEX)
    records.jobs.start(job_id, state=JobState.RUNNING, collection=COLLECTION, model_version=1)
    return job_id


def test_a_reindex_pauses_on_an_outage_and_a_sync_does_not(records: JobRecords) -> None:
    job_id = reindex(records)
    assert pause(records.jobs, job_id, TritonUnavailable("connection refused"), now=lambda: 100.0)
    job = records.jobs.get(job_id)
    assert job is not None
    assert (job.state, job.resume_state, job.paused_at) == (JobState.PAUSED, "running", 100.0)
    assert job.message.startswith("paused: Triton did not answer past the retry budget")
    sync_id = records.jobs.create(JobKind.SYNC)
    records.jobs.start(sync_id, state=JobState.RUNNING)
    assert not pause(records.jobs, sync_id, StoreError("down"))


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
