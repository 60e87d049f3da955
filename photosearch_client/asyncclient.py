"""The same client for asyncio applications: one awaitable method per operation."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Unpack

import httpx

from photosearch_client import calls
from photosearch_client.calls import Call, Mode, SearchOptions
from photosearch_client.errors import ApiUnreachable
from photosearch_client.models import (
    DuplicatesPage,
    Event,
    EventsAccepted,
    Health,
    Image,
    ModelInfo,
    Photo,
    SearchPage,
    SuggestPage,
)


class AsyncClient:
    """A client of one PhotoSearch API for asyncio: the methods, arguments, answers and errors
    of Client, awaited.

    Args:
        base_url: where the API answers.
        api_key: a key with the `search` scope; None searches anonymously.
        timeout_s: how long one call may take, connecting included.
        http: an httpx.AsyncClient of your own, left as it is.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 10.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        headers = {"X-API-Key": api_key} if api_key else {}
        self._http = http or httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_s
        )
        self._owned = http is None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def search(
        self,
        q: str,
        *,
        mode: Mode | None = None,
        not_: Sequence[str] = (),
        not_weight: float | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchPage:
        """Photos that match a description (Client.search)."""
        call = calls.text_search(q, mode, not_, not_weight, options)
        return calls.parse(SearchPage, await self._send(call))

    async def search_image(
        self,
        image: bytes | None = None,
        *,
        url: str | None = None,
        filename: str = "image",
        **options: Unpack[SearchOptions],
    ) -> SearchPage:
        """Photos that look like an image, by its bytes or its URL (Client.search_image)."""
        call = calls.image_search(image, url, filename, options)
        return calls.parse(SearchPage, await self._send(call))

    async def similar(self, photo_id: str, **options: Unpack[SearchOptions]) -> SearchPage:
        """More like this photo."""
        return calls.parse(SearchPage, await self._send(calls.similar(photo_id, options)))

    async def recommend(
        self,
        positive: Sequence[str],
        negative: Sequence[str] = (),
        **options: Unpack[SearchOptions],
    ) -> SearchPage:
        """More like these photos, not like those."""
        call = calls.recommend(positive, negative, options)
        return calls.parse(SearchPage, await self._send(call))

    async def events(
        self, events: Sequence[Event], *, session: str | None = None
    ) -> EventsAccepted:
        """Record what a searcher did with search results (Client.events)."""
        return calls.parse(EventsAccepted, await self._send(calls.events(events, session)))

    async def suggest(self, q: str, *, limit: int = 8) -> SuggestPage:
        """Completions of what a searcher typed (1 to 100 characters, not blank), best first:
        popular queries, then tags and words of titles (`limit`: 1 to 20)."""
        return calls.parse(SuggestPage, await self._send(calls.suggest(q, limit)))

    async def photo(self, photo_id: str) -> Photo:
        """A photo's metadata."""
        return calls.parse(Photo, await self._send(Call("GET", calls.photo_path(photo_id))))

    async def duplicates(
        self, photo_id: str, *, limit: int = 20, offset: int = 0
    ) -> DuplicatesPage:
        """A page of the other photos of the photo's near-duplicate group (limit 1 to 100;
        `next_offset` of the answer asks for the next)."""
        params = (("limit", str(limit)), ("offset", str(offset)))
        call = Call("GET", calls.photo_path(photo_id, "duplicates"), params)
        return calls.parse(DuplicatesPage, await self._send(call))

    async def original(self, photo_id: str) -> Image:
        """The photo's original file."""
        return calls.image(await self._send(Call("GET", calls.photo_path(photo_id, "image"))))

    async def thumbnail(self, photo_id: str) -> Image:
        """A JPEG thumbnail of the photo."""
        call = Call("GET", calls.photo_path(photo_id, "thumbnail"))
        return calls.image(await self._send(call))

    async def model(self) -> ModelInfo:
        """The model behind the live collection."""
        return calls.parse(ModelInfo, await self._send(Call("GET", "/v1/model")))

    async def health(self) -> Health:
        """Whether the API is ready, and each dependency's state (never raises for 503)."""
        return calls.parse(Health, await self._send(Call("GET", "/readyz", answers=(200, 503))))

    async def _send(self, call: Call) -> httpx.Response:
        try:
            response = await self._http.request(
                call.method, call.path, params=call.params, json=call.json, files=call.files
            )
        except httpx.TransportError as exc:
            raise ApiUnreachable(f"{call.method} {call.path}: {exc!r}") from exc
        return calls.check(response, call)
