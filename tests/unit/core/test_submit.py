"""A resume of a reindex whose switch was refused says which check refused it (core/submit.py),
on the session's Redis; nothing is sent to a worker, so no broker is needed."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery
from redis import Redis

from core.jobs import Jobs
from core.jobstatus import JobKind, JobState
from core.submit import submit_resume


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
