"""Load shedding in front of the search routes: past the bound a search is refused at once,
without reaching the app; other routes never count. The app behind it is a stand-in whose
search waits on an event, so "in flight" is exact rather than a matter of timing."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from query_api.http.shedding import Shedding


def held_app(
    release: asyncio.Event, entered: list[str], both_in: asyncio.Event | None = None
) -> Starlette:
    async def search(request: Request) -> JSONResponse:
        entered.append(request.url.path)
        if both_in is not None and len(entered) == 2:
            both_in.set()
        await release.wait()
        return JSONResponse({"results": []})

    async def health(request: Request) -> JSONResponse:
        entered.append(request.url.path)
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/search", search), Route("/healthz", health)])


async def test_past_the_bound_searches_are_refused_at_once_and_others_still_answer() -> None:
    release, both_in, entered, shed = asyncio.Event(), asyncio.Event(), list[str](), list[int]()
    app = Shedding(held_app(release, entered, both_in), 2, 3, on_shed=lambda: shed.append(1))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        held = [asyncio.create_task(client.get("/v1/search?q=a")) for _ in range(2)]
        await asyncio.wait_for(both_in.wait(), 30)  # both admitted are inside the app
        refused = await client.get("/v1/search?q=b")
        health = await client.get("/healthz")
        assert app.in_flight == 2
        release.set()
        answered = await asyncio.gather(*held)
        after = await client.get("/v1/search?q=c")

    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "3"
    assert refused.json()["error"] == "overloaded"
    assert "2 searches" in refused.json()["message"]
    assert shed == [1]
    assert health.status_code == 200
    assert [r.status_code for r in answered] == [200, 200]
    assert after.status_code == 200
    assert app.in_flight == 0
    assert entered.count("/v1/search") == 3  # the refused one never reached the app


async def test_a_bound_of_zero_sheds_nothing() -> None:
    release, entered = asyncio.Event(), list[str]()
    release.set()
    app = Shedding(held_app(release, entered), 0, 1)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        codes = [(await client.get("/v1/search")).status_code for _ in range(3)]
    assert codes == [200, 200, 200]
