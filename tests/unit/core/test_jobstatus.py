"""A job's kind, state and phase as enums: the records of the previous release, whose phase
was a plain string, read back as members; the docs and the API list every phase."""

from __future__ import annotations

import uuid
from pathlib import Path

from redis import Redis

from core.jobs import Jobs
from core.jobstatus import PHASES, JobKind, JobPhase, JobState, job_status, phases_table
from query_api.schemas.admin import Job

ROOT = Path(__file__).parents[3]


def test_a_record_the_previous_release_wrote_reads_back_as_enums(redis: Redis) -> None:
    prefix = f"previous-{uuid.uuid4().hex[:8]}"
    # The fields as that release's Jobs.update left them: strings, the phase among them.
    redis.hset(
        f"{prefix}:job:j1",
        mapping={
            "id": "j1",
            "kind": "reindex",
            "state": "finalizing",
            "phase": "catch-up",
            "round": "3",
            "lag": "12",
            "force": "False",
            "resume_state": "",
            "created_at": "1700000000.5",
            "retired_field": "left alone",
        },
    )
    job = Jobs(redis, prefix).get("j1")
    assert job is not None
    assert (job.kind, job.state, job.phase) == (
        JobKind.REINDEX,
        JobState.FINALIZING,
        JobPhase.CATCH_UP,
    )
    assert (job.round, job.lag, job.force, job.created_at) == (3, 12, False, 1700000000.5)
    assert job.phase.follows_live


def test_a_record_without_a_phase_has_none_and_every_phase_reads_back() -> None:
    job = job_status({"id": "s", "kind": "sync", "state": "running"})
    assert job.phase is JobPhase.NONE and not job.phase
    for phase in JobPhase:
        assert (
            job_status(
                {"id": "r", "kind": "reindex", "state": "running", "phase": phase.value}
            ).phase
            is phase
        )


def test_the_api_answer_as_json_reads_back_the_same() -> None:
    job = job_status(
        {"id": "r", "kind": "rollback", "state": "running", "phase": "replay", "force": True}
    )
    assert job_status(job.to_dict() | {"quality": ""}) == job


def test_only_catch_up_and_the_switch_follow_the_live_collection() -> None:
    assert {phase for phase in JobPhase if phase.follows_live} == {
        JobPhase.CATCH_UP,
        JobPhase.SWITCH,
    }


def test_the_model_update_page_and_the_api_describe_every_phase() -> None:
    assert set(PHASES) == set(JobPhase)
    page = (ROOT / "docs/operating/model-update.md").read_text(encoding="utf-8")
    assert phases_table() in page
    description = Job.model_fields["phase"].description or ""
    assert all(f"'{phase.value}'" in description for phase in JobPhase)
