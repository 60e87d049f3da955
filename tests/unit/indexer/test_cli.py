"""`photosearch index`: a followed job that has ended shows its counts and what it skipped;
the status of a job that does not exist is refused; status has a header row, shows a finished
job as finished, and leaves nothing behind in Redis when no worker answers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import typer
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from typer.testing import CliRunner

from core.jobs import Jobs
from core.jobstatus import JobKind, JobState, JobStatus
from core.settings import get_settings
from core.submit import Submitted
from core.taskqueue import control_queue
from core.unreachable import Reconnecting
from indexer.cli import jobs as job_commands
from indexer.cli.common import index_app
from indexer.cli.status import follow
from indexer.cli.worker import worker_command
from tests.support.indexing import marked_prefix
from tests.support.reconnecting import failing_first, on_a_test_clock


@pytest.fixture
def prefix(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The commands' settings under a prefix of this test's (marked_prefix)."""
    yield from marked_prefix(redis, monkeypatch)


def _lasting(redis: Redis) -> set[bytes]:
    """The keys with no expiry: what would stay for good."""
    return {key for key in redis.scan_iter() if redis.ttl(key) == -1}


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


class LosingRedis:
    """Job records whose reads fail `times` times as a Redis restarting refuses them."""

    def __init__(self, jobs: Jobs, times: int) -> None:
        self.jobs, self.times = jobs, times

    def get(self, job_id: str) -> JobStatus | None:
        if self.times:
            self.times -= 1
            raise RedisConnectionError(
                "Error 111 connecting to 127.0.0.1:6390. Connection refused."
            )
        return self.jobs.get(job_id)

    def problems(self, job_id: str) -> list[str]:
        return self.jobs.problems(job_id)


def test_a_followed_job_rides_out_a_lost_redis_and_ends_with_the_job_s_outcome(
    redis: Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = Jobs(redis, f"unit-{uuid.uuid4().hex}")
    job_id = jobs.create(JobKind.SYNC, source="file:///photos")
    jobs.start(job_id, state=JobState.RUNNING, collection="photos-m1-a", model_version=1)
    jobs.add(job_id, listed=2, total=2, done=2)
    jobs.finish(job_id, JobState.DONE)
    waits: list[float] = []
    said: list[str] = []
    retry = Reconnecting(120, said.append, now=lambda: sum(waits), sleep=waits.append)
    assert follow(LosingRedis(jobs, 3), job_id, retry=retry).state == JobState.DONE
    assert waits == [0.5, 1.0, 2.0]
    assert said[0].startswith("lost Redis at ") and "retrying for up to 120 s" in said[0]
    assert said[1:] == ["reconnected after 4 s"]
    assert "done 2  failed 0" in capsys.readouterr().out


def test_a_followed_job_whose_record_is_gone_is_said_so(redis: Redis) -> None:
    with pytest.raises(typer.Exit) as ended:
        follow(Jobs(redis, f"unit-{uuid.uuid4().hex}"), "no-such-job")
    assert ended.value.exit_code == 2


def test_the_status_of_a_job_that_does_not_exist_is_refused(prefix: str) -> None:
    answer = CliRunner().invoke(index_app, ["status", "no-such-job"])
    assert answer.exit_code == 2
    assert "no job no-such-job" in answer.output


def test_status_has_a_header_and_shows_a_finished_job_as_finished(
    redis: Redis, prefix: str
) -> None:
    jobs = Jobs(redis, prefix)
    finished = jobs.create(JobKind.SYNC, source="file:///photos")
    jobs.start(finished, state=JobState.RUNNING, collection="photos-m1-a", model_version=1)
    jobs.add(finished, listed=3, total=3, done=3)
    jobs.finish(finished, JobState.DONE)
    lasting = _lasting(redis)

    answer = CliRunner().invoke(index_app, ["status"])
    assert answer.exit_code == 0, answer.output
    header, row, progress, *rest = answer.output.splitlines()
    assert header.split() == [
        *("JOB", "KIND", "STATE", "DONE", "TOTAL", "FAILED", "SKIPPED", "DELETED", "RATE"),
        *("ETA", "COLLECTION"),
    ]
    cells = row.split()
    assert cells[:8] == [finished, "sync", "done", "3", "3", "0", "0", "0"]
    assert cells[-2:] == ["-", "photos-m1-a"]  # finished: no ETA, never "0s"
    assert "ETA" not in row and "listed 3" in progress
    assert rest == ["collections: no worker is running (is `photosearch worker` or `up` started?)"]
    assert _lasting(redis) == lasting  # no worker: nothing was sent, nothing stays


def test_status_rides_out_a_lost_redis_and_shows_the_jobs(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = Jobs(redis, prefix)
    job_id = jobs.create(JobKind.SYNC, source="file:///photos")
    retries = on_a_test_clock(monkeypatch)
    lost = [RedisConnectionError("Connection refused.") for _ in range(3)]
    monkeypatch.setattr(Jobs, "recent", failing_first(Jobs.recent, lost))
    answer = CliRunner().invoke(index_app, ["status"])
    assert answer.exit_code == 0, answer.output
    assert answer.output.splitlines()[1].split()[:3] == [job_id, "sync", "queued"]
    assert retries.waits == [0.5, 1.0, 2.0]
    assert retries.said[0].startswith("lost Redis at ")
    assert retries.said[1:] == ["reconnected after 4 s"]


def test_the_status_of_one_job_shows_its_problems(redis: Redis, prefix: str) -> None:
    jobs = Jobs(redis, prefix)
    job_id = jobs.create(JobKind.REINDEX, source="file:///photos")
    jobs.start(job_id, state=JobState.RUNNING, collection="photos-m2-a", model_version=2)
    off = "model version 2: auto tags off: not calibrated"
    jobs.note_problems(job_id, [off, "day1/notes.txt: unsupported file type .txt"])
    answer = CliRunner().invoke(index_app, ["status", job_id])
    assert answer.exit_code == 0, answer.output
    assert f"    problem: {off}\n" in answer.output
    assert "problem: day1/notes.txt" in answer.output
    assert "problem:" not in CliRunner().invoke(index_app, ["status"]).output


def test_a_status_query_no_worker_answers_is_withdrawn(redis: Redis, prefix: str) -> None:
    # A worker that said it runs, then died: the question goes, and comes back out unanswered.
    redis.set(f"{prefix}:workers:gone-1", "1", ex=60)
    answer = CliRunner().invoke(index_app, ["status"])
    assert answer.exit_code == 0, answer.output
    assert "no jobs" in answer.output
    assert "collections: no worker answered within 5 s" in answer.output
    assert redis.llen(control_queue(get_settings())) == 0


def test_a_redis_that_is_not_photosearchs_is_refused_before_anything_is_written(
    redis: Redis, prefix: str
) -> None:
    redis.delete(f"{prefix}:deployment")
    before = (redis.dbsize(), set(redis.scan_iter()))
    for command in (["status"], ["sync", "--source", "/tmp"], ["collections"], ["rollback"]):
        answer = CliRunner().invoke(index_app, command)
        assert answer.exit_code == 2, (command, answer.output)
        assert f"is not PhotoSearch's: it holds no {prefix}:deployment key" in answer.output
    assert (redis.dbsize(), set(redis.scan_iter())) == before


def test_a_refused_or_joined_job_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as refused:
        job_commands.started(
            Submitted("j1", refused="would delete 60% of the live index"), "sync", False
        )
    assert refused.value.exit_code == 1
    assert "refused: would delete 60% of the live index" in capsys.readouterr().err
    job_commands.started(Submitted("j2", joined=True), "sync of file:///photos", False)
    assert "joined the running job j2 (sync of file:///photos)" in capsys.readouterr().out


def test_a_queued_increment_is_said_so_and_followed_to_its_end(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    followed: list[str] = []
    monkeypatch.setattr(job_commands, "follow_job", followed.append)
    job_commands.started(Submitted("j3", queued=True), "increment of file:///photos", True)
    said = capsys.readouterr().out
    assert "increment of file:///photos job j3 queued: it waits in line" in said
    assert followed == ["j3"]  # --wait follows the queued job, not the one it waits for


def test_a_reindex_resumed_takes_none_of_a_new_ones_options() -> None:
    answer = CliRunner().invoke(index_app, ["reindex", "--resume", "j1", "--model-version", "2"])
    assert answer.exit_code == 2
    assert "--resume goes on with the job's own model version" in answer.output


def test_the_worker_refuses_a_log_level_celery_has_not() -> None:
    app = typer.Typer()
    app.command()(worker_command)
    answer = CliRunner().invoke(app, ["--loglevel", "verbose"], env={"COLUMNS": "200"})
    assert answer.exit_code == 2
    assert "'verbose' is not one of 'debug', 'info'" in answer.output
