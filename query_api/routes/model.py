"""Which model answers: the page warns when it has random weights (a machine without them)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter

from core.embedding.errors import ModelVersionUnavailable
from core.vectorstore import model_version_of
from query_api.deps import ReadCaller, ServicesDep
from query_api.http.errors import Unavailable
from query_api.routes.search import ERRORS
from query_api.schemas.answers import ModelResponse

router = APIRouter(prefix="/v1", tags=["search"])


@router.get("/model", response_model=ModelResponse, responses=ERRORS)
async def live_model(services: ServicesDep, caller: ReadCaller) -> ModelResponse:
    """The model version of the live collection and where its weights came from."""
    collection = await services.live_collection()
    version = model_version_of(collection)
    try:
        manifest = services.embedder.manifest(version)
    except ModelVersionUnavailable as exc:
        raise Unavailable("triton", str(exc), services.settings.api.retry_after_s) from None
    return ModelResponse(
        model_version=version,
        collection=collection,
        arch=_name(manifest.arch),
        weights=_name(manifest.weights),
        random_weights=manifest.random_weights,
        embedding_dim=manifest.embedding_dim,
    )


def _name(value: str) -> str:
    """A checkpoint or config file by its name: paths on the server are not the caller's."""
    return Path(value).name if "/" in value else value
