"""Each collection's role and age, from its aliases and the job record its name carries."""

from __future__ import annotations

import pytest

from core.collectionroles import Role, collection_roles, holds_room, job_id_of, room_refusal
from core.jobstatus import JobKind, JobState, JobStatus
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, CollectionInfo, collection_name

NOW = 1_000_000.0


def info(name: str, *aliases: str, points: int = 3) -> CollectionInfo:
    return CollectionInfo(name=name, model_version=2, dim=4, points=points, aliases=aliases)


def reindex(job_id: str, state: JobState, **fields: object) -> JobStatus:
    record: dict[str, object] = {
        "collection": collection_name(2, job_id),
        "model_version": 2,
        "created_at": NOW - 7200,
        **fields,
    }
    return JobStatus(id=job_id, kind=JobKind.REINDEX, state=state, **record)  # type: ignore[arg-type]


def roles_of(infos: list[CollectionInfo], jobs: list[JobStatus]) -> dict[str, Role]:
    records = {job.id: job for job in jobs}
    return {c.name: c.role for c in collection_roles(infos, records.get, now=lambda: NOW)}


def test_the_aliases_decide_before_any_job() -> None:
    live, previous = collection_name(2, "aaa"), collection_name(1, "bbb")
    # Even a record that calls the live collection's reindex failed: the alias is what serves.
    jobs = [reindex("aaa", JobState.FAILED)]
    roles = roles_of([info(live, LIVE_ALIAS), info(previous, PREVIOUS_ALIAS)], jobs)
    assert roles == {live: Role.LIVE, previous: Role.PREVIOUS}


@pytest.mark.parametrize(
    ("state", "role"),
    [
        (JobState.QUEUED, Role.REINDEX),
        (JobState.RUNNING, Role.REINDEX),
        (JobState.PLANNING, Role.REINDEX),
        (JobState.FINALIZING, Role.REINDEX),
        (JobState.PAUSED, Role.REINDEX),
        (JobState.FAILED, Role.FAILED),
        (JobState.CANCELLED, Role.FAILED),
        # Switched once, then left behind by a second switch: nothing goes on with it.
        (JobState.DONE, Role.ORPHAN),
    ],
)
def test_an_unaliased_collection_takes_its_reindex_jobs_role(state: JobState, role: Role) -> None:
    job = reindex("ccc", state)
    assert roles_of([info(job.collection)], [job]) == {job.collection: role}


def test_a_reindex_the_delete_guard_refused_leaves_an_orphan() -> None:
    # Its work is dropped: no resume goes on with it, a forced reindex replaces it.
    job = reindex("ccc", JobState.FAILED, refused=True)
    assert roles_of([info(job.collection)], [job]) == {job.collection: Role.ORPHAN}


def test_a_collection_no_kept_record_names_is_an_orphan() -> None:
    expired = collection_name(2, "ddd")  # its job's record has expired
    other = collection_name(2, "eee")  # the record of that id names another collection
    named_elsewhere = reindex("eee", JobState.FAILED, collection=collection_name(3, "eee"))
    sync = JobStatus(id="fff", kind=JobKind.SYNC, state=JobState.FAILED)
    sync.collection = collection_name(1, "fff")
    roles = roles_of(
        [info(expired), info(other), info(sync.collection), info("someone-elses")],
        [named_elsewhere, sync],
    )
    assert set(roles.values()) == {Role.ORPHAN}


def test_age_comes_from_the_job_record_and_is_unknown_without_one() -> None:
    job = reindex("ggg", JobState.RUNNING)
    orphan = collection_name(2, "hhh")
    found = collection_roles(
        [info(job.collection, points=7), info(orphan)], {job.id: job}.get, now=lambda: NOW
    )
    by_name = {c.name: c for c in found}
    mine = by_name[job.collection]
    assert (mine.job_id, mine.job_state, mine.points) == ("ggg", "running", 7)
    assert (mine.created_at, mine.age_s) == (NOW - 7200, 7200.0)
    assert (by_name[orphan].job_id, by_name[orphan].age_s) == ("", None)
    assert by_name[orphan].to_dict()["role"] == "orphan"


def test_the_job_id_is_the_tag_of_a_photosearch_name_only() -> None:
    assert job_id_of(collection_name(12, "a1b2c3")) == "a1b2c3"
    assert job_id_of("photos") is None
    assert job_id_of("someone-elses") is None


def test_only_a_failed_or_cancelled_reindex_with_its_collection_holds_the_room() -> None:
    assert holds_room(reindex("iii", JobState.FAILED))
    assert holds_room(reindex("iii", JobState.CANCELLED))
    assert not holds_room(reindex("iii", JobState.FAILED, dropped=True))
    assert not holds_room(reindex("iii", JobState.FAILED, refused=True))  # no work to resume
    assert not holds_room(reindex("iii", JobState.FAILED, collection=""))  # failed at start
    assert not holds_room(reindex("iii", JobState.DONE))
    assert not holds_room(reindex("iii", JobState.PAUSED))  # holds the reindex lock instead
    sync = JobStatus(id="jjj", kind=JobKind.SYNC, state=JobState.FAILED, collection="photos-m1-j")
    assert not holds_room(sync)


def test_the_refusal_names_the_commands_that_resume_and_drop() -> None:
    failed = room_refusal(reindex("kkk", JobState.FAILED))
    assert "reindex job kkk (model version 2) failed" in failed
    assert "`photosearch index reindex --resume kkk`" in failed
    assert "`photosearch index drop photos-m2-kkk`" in failed
    assert "was cancelled" in room_refusal(reindex("kkk", JobState.CANCELLED))
