"""What each collection is for: live, previous, a reindex's, a failed reindex's, or an orphan."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from core.jobstatus import FINISHED, JobKind, JobState, JobStatus
from core.vectorstore import (
    LIVE_ALIAS,
    PREVIOUS_ALIAS,
    CollectionInfo,
    StoreError,
    model_version_of,
)

# A reindex that ended so keeps its collection and its work, to be resumed (unless the delete
# guard refused its switch: that drops the work, and only a forced reindex goes on).
RESUMABLE_ENDS = (JobState.FAILED, JobState.CANCELLED)


class Role(StrEnum):
    LIVE = "live"
    PREVIOUS = "previous"
    REINDEX = "reindex"  # a reindex in progress builds it
    FAILED = "failed"  # a failed or cancelled reindex's: resume it or drop it
    ORPHAN = "orphan"  # no alias, and no job goes on with it: drop it


@dataclass(frozen=True)
class CollectionRole:
    """A collection as `index collections` and GET /v1/admin/collections show it."""

    name: str
    role: Role
    model_version: int
    dim: int
    points: int
    aliases: tuple[str, ...]
    job_id: str = ""  # the job whose record names it: the tag of its name
    job_state: str = ""
    created_at: float | None = None  # its job's, while the record is kept
    age_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def job_id_of(collection: str) -> str | None:
    """The tag a collection's name carries (photos-m2-<tag>): the id of the job that made it."""
    try:
        model_version_of(collection)
    except StoreError:
        return None
    return collection.rsplit("-", 1)[1]


def job_of(collection: str, get: Callable[[str], JobStatus | None]) -> JobStatus | None:
    """The kept job record that names the collection, if any."""
    job_id = job_id_of(collection)
    job = get(job_id) if job_id else None
    return job if job is not None and job.collection == collection else None


def role_of(info: CollectionInfo, job: JobStatus | None) -> Role:
    """An alias decides first; then the reindex job that made it, if it goes on or may."""
    if LIVE_ALIAS in info.aliases:
        return Role.LIVE
    if PREVIOUS_ALIAS in info.aliases:
        return Role.PREVIOUS
    if job is None or job.kind != JobKind.REINDEX:
        return Role.ORPHAN
    if job.state in RESUMABLE_ENDS:
        return Role.ORPHAN if job.refused else Role.FAILED
    if job.state not in FINISHED:
        return Role.REINDEX
    # A reindex that switched, whose collection two switches later no alias names.
    return Role.ORPHAN


def collection_roles(
    collections: Iterable[CollectionInfo],
    get: Callable[[str], JobStatus | None],
    *,
    now: Callable[[], float] = time.time,
) -> list[CollectionRole]:
    """Each collection with its role, and its age where its job's record is kept.

    get: a job record by id (`Jobs.get`).
    """
    at = now()
    roles = []
    for info in collections:
        job = job_of(info.name, get)
        created = job.created_at if job is not None and job.created_at else None
        roles.append(
            CollectionRole(
                name=info.name,
                role=role_of(info, job),
                model_version=info.model_version,
                dim=info.dim,
                points=info.points,
                aliases=info.aliases,
                job_id=job.id if job is not None else "",
                job_state=job.state if job is not None else "",
                created_at=created,
                age_s=None if created is None else max(0.0, at - created),
            )
        )
    return roles


def resume_command(job_id: str) -> str:
    return f"photosearch index reindex --resume {job_id}"


def drop_command(collection: str) -> str:
    return f"photosearch index drop {collection}"


def holds_room(job: JobStatus) -> bool:
    """A failed or cancelled reindex whose collection is neither dropped nor resumed: no new
    reindex starts beside it (two half-built collections would hold the store's room). One
    whose switch the delete guard refused has no work left to resume: a forced one follows."""
    return (
        job.kind == JobKind.REINDEX
        and job.state in RESUMABLE_ENDS
        and bool(job.collection)
        and not (job.dropped or job.refused)
    )


def room_refusal(job: JobStatus) -> str:
    """Why a new reindex does not start beside this one's collection, and what to run."""
    ended = "was cancelled" if job.state == JobState.CANCELLED else "failed"
    return (
        f"reindex job {job.id} (model version {job.model_version}) {ended} and its collection "
        f"{job.collection} is still there: resume it with `{resume_command(job.id)}`, or drop "
        f"it with `{drop_command(job.collection)}`"
    )
