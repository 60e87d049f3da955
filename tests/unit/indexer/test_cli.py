"""`photosearch index`: a followed job that has ended shows its counts and what it skipped;
the status of a job that does not exist is refused."""

from __future__ import annotations

import uuid

import pytest
from redis import Redis
from typer.testing import CliRunner

from core.jobs import JobKind, Jobs, JobState
from indexer.cli import follow, index_app


def test_a_followed_job_that_ended_shows_its_counts_and_problems(
    redis: Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = Jobs(redis, f"unit-{uuid.uuid4().hex}")
    job_id = jobs.create(JobKind.SYNC, source="file:///photos")
    jobs.start(job_id, state=JobState.RUNNING, collection="photos-m1-a", model_version=1)
    jobs.add(job_id, listed=3, total=3, done=2, skipped=1)
    jobs.note_problems(job_id, ["day1/notes.txt: unsupported file type .txt"])
    jobs.finish(job_id, JobState.DONE)
    assert follow(jobs, job_id, label="indexing").state == JobState.DONE
    shown = capsys.readouterr().out
    assert f"{job_id}  sync      done" in shown
    assert "done 2  failed 0  skipped 1  total 3" in shown
    assert "skipped/failed: day1/notes.txt: unsupported file type .txt" in shown


def test_the_status_of_a_job_that_does_not_exist_is_refused() -> None:
    answer = CliRunner().invoke(index_app, ["status", "no-such-job"])
    assert answer.exit_code == 2
    assert "no job no-such-job" in answer.output
