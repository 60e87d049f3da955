"""Admin (a key with the admin scope): start a sync, a reindex (or resume one) or a rollback;
read jobs and collections."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from starlette.concurrency import run_in_threadpool

from core.collectionroles import collection_roles
from core.embedding.errors import ModelVersionUnavailable
from core.jobstatus import FINISHED, JobKind, JobState, JobStatus
from core.sources import SourceError, check_source
from core.submit import (
    Submitted,
    UnknownJob,
    submit_reindex,
    submit_resume,
    submit_rollback,
    submit_sync,
)
from query_api.deps import AdminCaller, ServicesDep
from query_api.http.errors import ApiError
from query_api.schemas.admin import (
    Collection,
    DuplicateGroups,
    Job,
    JobAccepted,
    ReindexRequest,
    RollbackResponse,
    SyncRequest,
)
from query_api.schemas.answers import ErrorResponse
from query_api.search.duplicates import largest_groups
from query_api.services import Services

router = APIRouter(prefix="/v1/admin", tags=["admin"])

# 400: FastAPI refuses a body that is not UTF-8 JSON (or not multipart) before validating.
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 422, 503)
}


def _source(services: Services, asked: str | None) -> str:
    uri = asked or services.jobs.recall("source") or services.settings.indexer.source
    if uri is None:
        raise ApiError(422, "no source: give `source`, or set PHOTOSEARCH_INDEXER__SOURCE")
    try:
        return check_source(uri, services.settings)
    except SourceError as exc:  # a host, a relative path, outside the allowed roots...
        raise ApiError(422, str(exc)) from None


def _job(services: Services, job: JobStatus) -> Job:
    data: dict[str, Any] = job.to_dict()
    return Job(**data, problems=services.jobs.problems(job.id)[:100])


def _accepted(submitted: Submitted, kind: str) -> JobAccepted:
    """The job answering the request; 409 when another job holds what it would change."""
    if submitted.refused:
        raise ApiError(409, submitted.refused)
    return JobAccepted(
        job_id=submitted.job_id,
        kind=kind,
        status_url=f"/v1/admin/jobs/{submitted.job_id}",
        joined=submitted.joined,
        queued=submitted.queued,
    )


@router.post("/sync", status_code=202, response_model=JobAccepted, responses=ERRORS)
async def start_sync(body: SyncRequest, services: ServicesDep, caller: AdminCaller) -> JobAccepted:
    """Index what is new or changed in the source now (the nightly job, on demand); joins a
    sync of the same kind, source and force already running (or in line). An increment asked
    for while another job changes the live collection waits in line (`queued`); a sync is
    refused (409). One that would delete more than
    max_delete_share of the live index is refused (the job says so) unless forced."""
    kind = JobKind(body.kind)
    if kind == JobKind.INCREMENT and not services.settings.indexer.feed:
        raise ApiError(422, "no change feed is configured (PHOTOSEARCH_INDEXER__FEED)")

    def send() -> Submitted:
        source = _source(services, body.source)
        return submit_sync(services.tasks, services.jobs, source, kind, force=body.force)

    return _accepted(await run_in_threadpool(send), kind)


@router.post("/reindex", status_code=202, response_model=JobAccepted, responses=ERRORS)
async def start_reindex(
    body: ReindexRequest, services: ServicesDep, caller: AdminCaller
) -> JobAccepted:
    """Rebuild the index with another model version beside the live one, then switch."""
    try:
        services.embedder.manifest(body.model_version)
    except ModelVersionUnavailable:
        raise ApiError(
            422, f"model version {body.model_version} is not exported to the repository"
        ) from None

    def send() -> Submitted:
        source = _source(services, body.source)
        return submit_reindex(
            services.tasks, services.jobs, body.model_version, source, force=body.force
        )

    return _accepted(await run_in_threadpool(send), JobKind.REINDEX)


@router.post(
    "/reindex/{job_id}/resume", status_code=202, response_model=JobAccepted, responses=ERRORS
)
async def resume_reindex(job_id: str, services: ServicesDep, caller: AdminCaller) -> JobAccepted:
    """Go on with a failed, cancelled or paused reindex (or one whose workers died) from its
    kept work; 409 when the job is no reindex, is done, or another reindex runs."""
    try:
        submitted = await run_in_threadpool(submit_resume, services.tasks, services.jobs, job_id)
    except UnknownJob:
        raise ApiError(404, f"no job {job_id!r}") from None
    return _accepted(submitted, JobKind.REINDEX)


@router.post(
    "/rollback",
    response_model=RollbackResponse,
    responses={
        **ERRORS,
        202: {"model": RollbackResponse, "description": "No worker has answered yet."},
    },
)
async def rollback(
    services: ServicesDep, caller: AdminCaller, response: Response
) -> RollbackResponse:
    """Point searches back at the previous collection; waits briefly for the worker's answer."""
    job_id = await run_in_threadpool(submit_rollback, services.tasks, services.jobs)
    job = await run_in_threadpool(services.jobs.wait, job_id, services.settings.api.admin_wait_s)
    if job is None or job.state not in FINISHED:
        response.status_code = 202
        state = job.state if job is not None else JobState.QUEUED
        return RollbackResponse(
            job_id=job_id, state=state, message="no worker has answered yet: see the job"
        )
    if job.state == JobState.FAILED:
        raise ApiError(409, f"rollback refused: {job.message}")
    return RollbackResponse(job_id=job_id, state="done", message=job.message)


@router.get("/jobs", response_model=list[Job], responses=ERRORS)
async def jobs(
    services: ServicesDep,
    caller: AdminCaller,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> list[Job]:
    """Recent jobs, newest first, with counts, rate and ETA."""

    def read() -> list[Job]:
        return [_job(services, job) for job in services.jobs.recent(limit)]

    return await run_in_threadpool(read)


@router.get("/jobs/{job_id}", response_model=Job, responses=ERRORS)
async def job(job_id: str, services: ServicesDep, caller: AdminCaller) -> Job:
    """One job, with the reasons of its skipped and failed photos."""
    found = await run_in_threadpool(services.jobs.get, job_id)
    if found is None:
        raise ApiError(404, f"no job {job_id!r}")
    return await run_in_threadpool(_job, services, found)


@router.get("/collections", response_model=list[Collection], responses=ERRORS)
async def collections(services: ServicesDep, caller: AdminCaller) -> list[Collection]:
    """Every collection with its role, model version, size, aliases and age."""
    found = await services.in_store("collections", services.store.collections)
    roles = await run_in_threadpool(collection_roles, found, services.jobs.get)
    return [Collection(**role.to_dict()) for role in roles]


@router.get("/duplicates", response_model=DuplicateGroups, responses=ERRORS)
async def duplicate_groups(
    services: ServicesDep,
    caller: AdminCaller,
    limit: Annotated[int, Query(ge=1, le=1000, description="How many groups.")] = 50,
) -> DuplicateGroups:
    """The largest near-duplicate groups of the live collection, with their first ids."""
    return await largest_groups(limit, calls=services.calls, live=services.live)
