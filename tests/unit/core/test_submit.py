"""Starting jobs (core/submit.py) on the session's Redis: a resume of a reindex whose switch was
refused says which check refused it; an increment asked for while a sync runs waits in line.
Nothing is sent to a worker, so no broker is needed."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery
from redis import Redis

from core.jobs import LIVE_LOCK, Jobs
from core.jobstatus import JobKind, JobState
from core.submit import Submitted, submit_resume, submit_sync

SOURCE = "file:///photos"


@pytest.mark.parametrize(
    ("message", "guard"),
    [
        (
            "refused by the quality gate: nDCG@10 of 0.54 falls 0.066 below the live 0.61",
            "quality gate",
        ),
        (
            "refused: photos-m2-x holds 10 photos, fewer than (1 - max_delete_share=0.5)",
            "delete guard",
        ),
    ],
)
def test_a_refused_reindex_s_resume_names_what_refused_it(
    redis: Redis, message: str, guard: str
) -> None:
    jobs = Jobs(redis, f"unit-{uuid.uuid4().hex}")
    job_id = jobs.create(JobKind.REINDEX, collection="photos-m2-x", refused=1)
    jobs.finish(job_id, JobState.FAILED, message)
    submitted = submit_resume(Celery(), jobs, job_id)
    assert submitted.refused is not None
    assert f"refused by the {guard} and its work dropped" in submitted.refused


def running_sync(jobs: Jobs, kind: JobKind = JobKind.SYNC) -> str:
    """A job that holds the live lock and runs (its task, never sent, is a worker's)."""
    job_id = jobs.create(kind, source=SOURCE, force=0)
    assert jobs.claim_lock(LIVE_LOCK, job_id) is None
    jobs.start(job_id, state=JobState.RUNNING)
    return job_id


@pytest.mark.parametrize("holder", [JobState.RUNNING, JobState.PAUSED])
def test_an_increment_asked_for_while_a_sync_runs_or_is_paused_waits_in_line(
    redis: Redis, holder: JobState
) -> None:
    jobs = Jobs(redis, f"unit-{uuid.uuid4().hex}")
    sync_id = running_sync(jobs)
    jobs.update(sync_id, state=holder)  # a paused sync still holds the live collection
    submitted = submit_sync(Celery(), jobs, SOURCE, JobKind.INCREMENT)
    assert submitted.queued and not (submitted.refused or submitted.joined), submitted
    queued = jobs.get(submitted.job_id)
    assert queued is not None and (queued.kind, queued.state) == (JobKind.INCREMENT, "queued")
    assert queued.message == f"waits for sync job {sync_id} to finish with the live collection"
    assert [job.id for job in jobs.in_line(LIVE_LOCK)] == [submitted.job_id]
    # The same increment asked again joins the one in line; a sync of another source is
    # refused as before (an operator's sync does not queue).
    again = submit_sync(Celery(), jobs, SOURCE, JobKind.INCREMENT)
    assert again == Submitted(submitted.job_id, joined=True)
    other = submit_sync(Celery(), jobs, "file:///elsewhere")
    assert other.refused.startswith(f"sync job {sync_id} is changing the live collection")
    assert [job.id for job in jobs.in_line(LIVE_LOCK)] == [submitted.job_id]


def test_an_increment_asked_for_while_the_same_increment_runs_joins_it(redis: Redis) -> None:
    jobs = Jobs(redis, f"unit-{uuid.uuid4().hex}")
    increment_id = running_sync(jobs, JobKind.INCREMENT)
    submitted = submit_sync(Celery(), jobs, SOURCE, JobKind.INCREMENT)
    assert submitted == Submitted(increment_id, joined=True)
    assert jobs.in_line(LIVE_LOCK) == []
