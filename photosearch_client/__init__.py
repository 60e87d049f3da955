"""A typed Python client of the PhotoSearch HTTP API, for internal applications.

It needs httpx and pydantic only, never the service's own packages:

    from photosearch_client import Client

    with Client("https://photosearch.internal", api_key=KEY) as photos:
        page = photos.search("a red bicycle", tags_any=["street"], limit=10)
        for result in page.results:
            print(result.id, result.score, result.metadata.title)

AsyncClient has the same methods, awaited, for asyncio applications.
"""

from photosearch_client.asyncclient import AsyncClient
from photosearch_client.calls import Mode, SearchOptions
from photosearch_client.client import Client
from photosearch_client.errors import ApiError, ApiUnreachable, PhotoSearchError
from photosearch_client.models import (
    ColorShare,
    Duplicates,
    DuplicatesPage,
    Event,
    EventsAccepted,
    FacetCounts,
    FacetValue,
    Health,
    Image,
    ModelInfo,
    Photo,
    PhotoAttributes,
    PhotoMetadata,
    Result,
    SearchPage,
    Suggestion,
    SuggestPage,
)

__all__ = [
    "ApiError",
    "ApiUnreachable",
    "AsyncClient",
    "Client",
    "ColorShare",
    "Duplicates",
    "DuplicatesPage",
    "Event",
    "EventsAccepted",
    "FacetCounts",
    "FacetValue",
    "Health",
    "Image",
    "Mode",
    "ModelInfo",
    "Photo",
    "PhotoAttributes",
    "PhotoMetadata",
    "PhotoSearchError",
    "Result",
    "SearchOptions",
    "SearchPage",
    "SuggestPage",
    "Suggestion",
]
