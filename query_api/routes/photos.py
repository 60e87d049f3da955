"""One photo: its metadata, "more like this", its original and its thumbnail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Response

from core.embedding.images import ImageLimits
from core.vectorstore import CollectionNotFound, StoredPhoto
from query_api.deps import ReadCaller, RootPath, SearchMeter, ServicesDep, once_each
from query_api.http.errors import ApiError
from query_api.http.ratelimit import price
from query_api.images.photos import (
    etag_of,
    make_thumbnail,
    media_type,
    read_original,
    thumbnail_key,
)
from query_api.schemas.answers import DuplicatesResponse, ErrorResponse, Photo, SearchResponse
from query_api.schemas.search import DuplicatesPage, Page
from query_api.search.duplicates import photo_duplicates
from query_api.search.opening import SearchesDep
from query_api.search.pipeline import stored_photo
from query_api.services import Services

router = APIRouter(prefix="/v1/photos", tags=["photos"], dependencies=[Depends(once_each)])

ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorResponse} for code in (401, 403, 404, 422, 503)
}
# More like this and a photo's duplicates are rate limited, as the searches are
# (query_api.deps.SearchMeter).
LIMITED: dict[int | str, dict[str, object]] = {**ERRORS, 429: {"model": ErrorResponse}}
# Photos change only with their content version, which the ETag carries. Where a key is
# needed to see them, no shared cache (a CDN, a proxy) may keep them for the next caller.
_PUBLIC = "public, max-age=86400"
_PRIVATE = "private, max-age=86400"
# A photo's id in a path: its catalogue key (or its manifest's id), slashes and all.
PhotoId = Annotated[
    str,
    Path(
        description="The photo's id, as a search answered it.",
        openapi_examples={"a photo": {"value": "2024/06/red-bicycle.jpg"}},
    ),
]


def _binary(media_type: str, description: str) -> dict[str, object]:
    schema = {"type": "string", "format": "binary"}
    return {"description": description, "content": {media_type: {"schema": schema}}}


ORIGINAL = {**ERRORS, 200: _binary("image/*", "The file, with its media type.")}
THUMBNAIL = {**ERRORS, 200: _binary("image/jpeg", "The thumbnail.")}


async def _record(services: Services, photo_id: str) -> StoredPhoto:
    collection = await services.live_collection()
    try:
        found = await services.in_store(
            "retrieve", lambda: services.store.retrieve(collection, [photo_id])
        )
    except CollectionNotFound:
        found = []
    if not found:
        raise ApiError(404, f"no photo {photo_id!r} in the index")
    return found[0]


@dataclass(frozen=True)
class PhotoFile:
    """A photo whose file (or a rendition of it) a request asks for, and the ETag the caller
    holds of it (If-None-Match)."""

    services: Services
    record: StoredPhoto
    if_none_match: str | None

    def validators(self, variant: str) -> tuple[dict[str, str], str]:
        """The caching headers of one rendition of the photo, and its ETag."""
        etag = etag_of(self.record, variant)
        cache = _PUBLIC if self.services.settings.api.anonymous_search else _PRIVATE
        return {"ETag": etag, "Cache-Control": cache}, etag


async def _photo_file(
    photo_id: PhotoId,
    services: ServicesDep,
    caller: ReadCaller,
    if_none_match: Annotated[str | None, Header()] = None,
) -> PhotoFile:
    return PhotoFile(services, await _record(services, photo_id), if_none_match)


# The opening of a route of a photo's file: the search scope, the photo's record (404 if it is
# not indexed) and the ETag the caller holds.
PhotoFileDep = Annotated[PhotoFile, Depends(_photo_file)]


@router.get("/{photo_id:path}/similar", response_model=SearchResponse, responses=LIMITED)
async def similar(
    photo_id: str, page: Annotated[Page, Query()], search: SearchesDep
) -> SearchResponse:
    """More like this: neighbours of the photo's stored vector, never the photo itself."""
    return await search.similar(photo_id, page)


@router.get("/{photo_id:path}/duplicates", response_model=DuplicatesResponse, responses=LIMITED)
async def duplicates(
    photo_id: str,
    page: Annotated[DuplicatesPage, Query()],
    services: ServicesDep,
    meter: SearchMeter,
    root: RootPath,
) -> DuplicatesResponse:
    """The photo's near-duplicates: the other photos of its group (crops, re-encodings,
    resizes, bursts of one scene), as the indexer grouped them, a page at a time."""
    async with meter.paying(price(0, 0)):
        return await photo_duplicates(
            photo_id, page, calls=services.calls, live=services.live, root=root
        )


@router.get("/{photo_id:path}/image", response_class=Response, responses=ORIGINAL)
async def image(photo: PhotoFileDep) -> Response:
    """The original file of the photo."""
    services, record = photo.services, photo.record
    headers, etag = photo.validators("original")
    if photo.if_none_match == etag:
        return Response(status_code=304, headers=headers)
    data = await services.images.single_flight(
        etag, lambda: services.images.run(lambda reserve: read_original(services, record))
    )
    return Response(data, media_type=media_type(record), headers=headers)


@router.get("/{photo_id:path}/thumbnail", response_class=Response, responses=THUMBNAIL)
async def thumbnail(photo: PhotoFileDep) -> Response:
    """A JPEG thumbnail for result grids: made once per photo version, kept in Redis."""
    services, record = photo.services, photo.record
    size = services.settings.api.thumbnail_size
    headers, etag = photo.validators(f"thumb{size}")
    if photo.if_none_match == etag:
        return Response(status_code=304, headers=headers)
    key = thumbnail_key(services, etag)
    data = await services.cache.get_bytes(key)
    if data is None:
        limits = ImageLimits.of_stored(services.settings.images)

        async def build() -> bytes:
            # Concurrent first requests share this one job (keyed by the ETag); the Redis
            # write is inside it so they also share one write.
            made = await services.images.run(
                lambda reserve: make_thumbnail(
                    read_original(services, record), size, limits, reserve
                ),
            )
            await services.cache.put_bytes(key, made, services.settings.api.thumbnail_ttl_s)
            return made

        data = await services.images.single_flight(etag, build)
    return Response(data, media_type="image/jpeg", headers=headers)


@router.get("/{photo_id:path}", response_model=Photo, responses=ERRORS)
async def photo(photo_id: str, services: ServicesDep, caller: ReadCaller, root: RootPath) -> Photo:
    """A photo's metadata."""
    return stored_photo(root, await _record(services, photo_id))
