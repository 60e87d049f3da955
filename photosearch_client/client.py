"""The client internal applications call the search API with: one method per operation."""

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


class Client:
    """A client of one PhotoSearch API, with one key.

    Args:
        base_url: where the API answers, e.g. "https://photosearch.internal".
        api_key: a key with the `search` scope (`photosearch api key NAME` makes one); None
            searches anonymously, where the API allows it.
        timeout_s: how long one call may take, connecting included.
        http: an httpx.Client of your own (proxies, certificates, transports); its base URL,
            headers and timeout are left as they are.

    Every method raises ApiError (with the status, the API's error code and its message) when
    the API answers with an error, and ApiUnreachable when it does not answer.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 10.0,
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"X-API-Key": api_key} if api_key else {}
        self._http = http or httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self._owned = http is None

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def search(
        self,
        q: str,
        *,
        mode: Mode | None = None,
        not_: Sequence[str] = (),
        not_weight: float | None = None,
        **options: Unpack[SearchOptions],
    ) -> SearchPage:
        """Photos that match a description.

        Args:
            q: what the photo shows, in words.
            mode: "hybrid" (the API's default: meaning and words), "vector" or "keyword".
            not_: descriptions to move away from; `not_weight` (0..1) says how far.
            **options: the page, filters and arrangement (SearchOptions).

        Returns:
            One page of results; `next_offset` is the next page's `offset`.
        """
        call = calls.text_search(q, mode, not_, not_weight, options)
        return calls.parse(SearchPage, self._send(call))

    def search_image(
        self,
        image: bytes | None = None,
        *,
        url: str | None = None,
        filename: str = "image",
        **options: Unpack[SearchOptions],
    ) -> SearchPage:
        """Photos that look like an image: its bytes, or its URL for the API to fetch.

        Args:
            image: the image file's bytes (JPEG, PNG, WebP, GIF or TIFF).
            url: instead, an http(s) URL of the image (public addresses only, unless the
                API's PHOTOSEARCH_API__IMAGE_URL_ALLOW lists the host).
            filename: the upload's file name.
            **options: the page, filters and arrangement (SearchOptions).
        """
        call = calls.image_search(image, url, filename, options)
        return calls.parse(SearchPage, self._send(call))

    def similar(self, photo_id: str, **options: Unpack[SearchOptions]) -> SearchPage:
        """More like this photo (never the photo itself)."""
        return calls.parse(SearchPage, self._send(calls.similar(photo_id, options)))

    def recommend(
        self,
        positive: Sequence[str],
        negative: Sequence[str] = (),
        **options: Unpack[SearchOptions],
    ) -> SearchPage:
        """More like these photos (1 to 20 ids), not like those (up to 20)."""
        return calls.parse(SearchPage, self._send(calls.recommend(positive, negative, options)))

    def events(self, events: Sequence[Event], *, session: str | None = None) -> EventsAccepted:
        """Record what a searcher did with search results (1 to 50 events, kept or refused
        together). `session`: a random id of the searcher's session, never anything personal:
        the click judgements count distinct sessions."""
        return calls.parse(EventsAccepted, self._send(calls.events(events, session)))

    def suggest(self, q: str, *, limit: int = 8) -> SuggestPage:
        """Completions of what a searcher typed (1 to 100 characters, not blank), best first:
        popular queries, then tags and words of titles (`limit`: 1 to 20)."""
        return calls.parse(SuggestPage, self._send(calls.suggest(q, limit)))

    def photo(self, photo_id: str) -> Photo:
        """A photo's metadata."""
        return calls.parse(Photo, self._send(Call("GET", calls.photo_path(photo_id))))

    def duplicates(self, photo_id: str, *, limit: int = 20, offset: int = 0) -> DuplicatesPage:
        """A page of the other photos of the photo's near-duplicate group (limit 1 to 100;
        `next_offset` of the answer asks for the next)."""
        params = (("limit", str(limit)), ("offset", str(offset)))
        call = Call("GET", calls.photo_path(photo_id, "duplicates"), params)
        return calls.parse(DuplicatesPage, self._send(call))

    def original(self, photo_id: str) -> Image:
        """The photo's original file."""
        return calls.image(self._send(Call("GET", calls.photo_path(photo_id, "image"))))

    def thumbnail(self, photo_id: str) -> Image:
        """A JPEG thumbnail of the photo."""
        return calls.image(self._send(Call("GET", calls.photo_path(photo_id, "thumbnail"))))

    def model(self) -> ModelInfo:
        """The model version, architecture and weights behind the live collection."""
        return calls.parse(ModelInfo, self._send(Call("GET", "/v1/model")))

    def health(self) -> Health:
        """Whether the API is ready (`/readyz`), and the state of each dependency; a replica
        that is not ready answers too (its `ready` is False), it raises nothing for that."""
        return calls.parse(Health, self._send(Call("GET", "/readyz", answers=(200, 503))))

    def _send(self, call: Call) -> httpx.Response:
        try:
            response = self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                files=call.files,
            )
        except httpx.TransportError as exc:
            raise ApiUnreachable(f"{call.method} {call.path}: {exc!r}") from exc
        return calls.check(response, call)
