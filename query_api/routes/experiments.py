"""Admin (a key with the admin scope): start an interleaved experiment between the live
collection and a candidate, read its counts and sign test, end it with a decision."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from core.embedding.errors import ModelVersionUnavailable
from core.experiments import (
    Experiment,
    ExperimentError,
    current,
    end,
    go_on,
    reindex_of,
    start,
    switch_refusal,
)
from core.jobstatus import FINISHED
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, model_version_of
from query_api.deps import AdminCaller, ServicesDep
from query_api.http.errors import ApiError
from query_api.schemas.answers import ErrorResponse
from query_api.schemas.experiment import EndRequest, ExperimentRequest, ExperimentStatus
from query_api.services import Services

router = APIRouter(prefix="/v1/admin/experiments", tags=["admin"])
log = logging.getLogger(__name__)

ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 422, 503)
}


def _status(services: Services, experiment: Experiment) -> ExperimentStatus:
    return ExperimentStatus.of(experiment, services.settings.api.experiment_alpha)


@router.post("", status_code=201, response_model=ExperimentStatus, responses=ERRORS)
async def start_experiment(
    body: ExperimentRequest, services: ServicesDep, caller: AdminCaller
) -> ExperimentStatus:
    """Interleave a share of text searches with a candidate collection's ranking; 409 while
    another experiment runs."""
    store = services.store
    found = await services.in_store("collections", store.collections)
    stored = next((info for info in found if info.name == body.candidate), None)
    # A reindex's collection may be named as soon as its job is: started before its worker
    # creates the collection, the experiment holds the reindex before its switch.
    job = await run_in_threadpool(reindex_of, body.candidate, services.jobs.get)
    building = job is not None and job.state not in FINISHED
    if stored is None and not building:
        raise ApiError(
            404,
            f"no collection {body.candidate!r}, nor a reindex running that builds it "
            "(GET /v1/admin/collections)",
        )
    version = stored.model_version if stored is not None else model_version_of(body.candidate)
    try:
        live = await services.in_store("resolve", lambda: store.resolve(LIVE_ALIAS))
    except CollectionNotFound:
        raise ApiError(409, "there is no live collection to compare with (run a sync)") from None
    try:
        services.embedder.manifest(version)
    except ModelVersionUnavailable:
        raise ApiError(
            422,
            f"model version {version} of {body.candidate} is not exported to the "
            "repository: its queries could not be embedded",
        ) from None
    share = body.share or services.settings.api.experiment_share
    try:
        started = await run_in_threadpool(
            lambda: start(
                services.jobs.redis,
                services.settings.redis.prefix,
                live=live,
                candidate=body.candidate,
                share=share,
            )
        )
    except ExperimentError as exc:
        raise ApiError(409 if "running" in str(exc) else 422, str(exc)) from None
    return _status(services, started)


async def _current(services: Services) -> Experiment:
    found = await run_in_threadpool(current, services.jobs.redis, services.settings.redis.prefix)
    if found is None:
        raise ApiError(404, "no experiment was started (POST /v1/admin/experiments)")
    return found


@router.get("/current", response_model=ExperimentStatus, responses=ERRORS)
async def current_experiment(services: ServicesDep, caller: AdminCaller) -> ExperimentStatus:
    """The running experiment, or the last one with its decision."""
    return _status(services, await _current(services))


@router.post("/current/end", response_model=ExperimentStatus, responses=ERRORS)
async def end_experiment(
    body: EndRequest, services: ServicesDep, caller: AdminCaller
) -> ExperimentStatus:
    """End the running experiment with a decision, which the reindex waiting on it follows;
    switching while the live collection wins significantly needs `force`."""
    experiment = await _current(services)
    refusal = switch_refusal(experiment, services.settings.api.experiment_alpha)
    if body.decision == "switch" and not body.force and refusal:
        raise ApiError(409, refusal)
    try:
        ended = await run_in_threadpool(
            lambda: end(
                services.jobs.redis,
                services.settings.redis.prefix,
                experiment.id,
                body.decision,
                by="admin",
                reason="forced" if body.force else "",
            )
        )
    except ExperimentError as exc:
        raise ApiError(409, str(exc)) from None
    try:
        await run_in_threadpool(go_on, services.tasks, services.jobs, ended.candidate)
    except Exception as exc:  # the broker's, whatever its kind: the decision is recorded
        # The workers' next nudge moves the reindex on instead, within 30 s.
        log.warning("could not send the reindex of %s its next step: %s", ended.candidate, exc)
    return _status(services, ended)
