"""Admission control and Server-Timing, against a real Triton whose image executions the test
holds (tests/support/gated.py): embeddings in flight are then exactly what the test made."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from core.settings import Settings
from tests.support.api import (
    SEARCH_KEY,
    ApiServer,
    api_settings,
    index_photos,
    metric,
    own_store,
    serving,
)
from tests.support.gated import Gated, gated_triton
from tests.support.images import encode
from tests.support.indexing import variant
from tests.support.waiting import wait_until

SEARCH = {"X-API-Key": SEARCH_KEY}
BOUND = 2


@dataclass
class Overload:
    gated: Gated
    server: ApiServer
    settings: Settings
    photo_ids: list[str]

    def text(self, q: str) -> httpx.Response:
        return httpx.get(f"{self.server.url}/v1/search", params={"q": q}, headers=SEARCH)

    def image(self, seed: int) -> httpx.Response:
        jpeg = encode(variant(seed, 96), "JPEG")
        return httpx.post(
            f"{self.server.url}/v1/search/image",
            files={"file": ("q.jpg", jpeg, "image/jpeg")},
            headers=SEARCH,
            timeout=60,
        )

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.server.metrics_url, name, **labels)


@pytest.fixture(scope="module")
def overload(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Overload]:
    work = tmp_path_factory.mktemp("overload")
    with gated_triton(repository, work) as gated:
        # A long embedding deadline: the held searches wait on the gate, not on a timer.
        settings = api_settings(
            work / "data",
            gated.server.url,
            repository,
            max_embeds_in_flight=BOUND,
            embed_timeout_s=30,
        )
        with own_store(settings) as store:
            indexed = index_photos(store, settings, work / "photos", 6)
            with serving(settings, store) as server:
                yield Overload(gated, server, settings, indexed.ids)


def _held(o: Overload, pool: ThreadPoolExecutor, seeds: range) -> list[Future[httpx.Response]]:
    """Image searches that wait in Triton behind the closed gate, one slot each."""
    pending, seen = o.gated.pending(), len(o.gated.executions())
    held = [pool.submit(o.image, seed) for seed in seeds]

    def in_triton() -> float:
        # Waiting in its queue, or in the execution the gate holds (one batch or more).
        running = sum(len(e) for e in o.gated.executions()[seen:])
        return o.gated.pending() - pending + running

    wait_until(lambda: in_triton() >= len(held), 60, "the held searches reaching Triton")
    return held


def test_past_its_bound_a_replica_refuses_searches_that_need_triton_and_admits_after(
    overload: Overload,
) -> None:
    o = overload
    cached = o.text("a cached query")  # embedded now, so later served from Redis
    assert cached.status_code == 200, cached.text
    refused_before = o.metric("photosearch_overload_refused_total")
    o.gated.gate.touch()
    try:
        with ThreadPoolExecutor(BOUND) as pool:
            held = _held(o, pool, range(BOUND))
            # Every slot is taken: searches that need Triton are refused at once ...
            for answer in (o.image(99), o.text("a query nobody searched before")):
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"] == "overloaded"
                assert answer.headers["Retry-After"] == "1"
            # ... while those that need no embedding are still answered.
            assert o.text("a cached query").status_code == 200
            similar = httpx.get(
                f"{o.server.url}/v1/photos/{o.photo_ids[0]}/similar", headers=SEARCH
            )
            assert similar.status_code == 200, similar.text
            o.gated.gate.unlink()
            assert [f.result(timeout=60).status_code for f in held] == [200] * BOUND
    finally:
        o.gated.gate.unlink(missing_ok=True)
    refused = o.metric("photosearch_overload_refused_total") - refused_before
    assert refused == 2
    assert o.metric("photosearch_overload_refused_total", kind="text") >= 1
    # The slots are free again: the query refused above is now embedded and answered.
    assert o.text("a query nobody searched before").status_code == 200


def _timings(answer: httpx.Response) -> dict[str, float]:
    """Server-Timing's stages: {name: milliseconds}."""
    stages = {}
    for part in answer.headers["Server-Timing"].split(","):
        name, *params = (p.strip() for p in part.split(";"))
        durations = [float(p[4:]) for p in params if p.startswith("dur=")]
        assert len(durations) == 1, part
        stages[name] = durations[0]
    return stages


def test_every_search_names_its_stages_in_server_timing_and_the_histograms(
    overload: Overload,
) -> None:
    o = overload
    route = {"route": "/v1/search"}
    embeds_before = o.metric("photosearch_request_stage_seconds_count", stage="embed", **route)
    first = o.text("stages of an uncached search")
    again = o.text("stages of an uncached search")
    assert first.status_code == again.status_code == 200
    uncached, cached = _timings(first), _timings(again)
    assert list(uncached) == [
        "resolve",
        "cache",
        "admit",
        "tokenize",
        "embed",
        "search",
        "rerank",  # the default search is hybrid and collapses near-duplicates
        "other",
        "total",
    ]
    # The second time the embedding comes from Redis: no tokenizer, no Triton.
    assert list(cached) == ["resolve", "cache", "search", "rerank", "other", "total"]
    for stages in (uncached, cached):
        assert all(ms >= 0 for ms in stages.values())
        parts = sum(ms for name, ms in stages.items() if name != "total")
        # Rounded to 0.01 ms each: the stages add up to the total.
        assert parts == pytest.approx(stages["total"], abs=0.01 * len(stages))
    # The client waited at least the server's time (httpx's own measure of the exchange).
    assert uncached["total"] <= first.elapsed.total_seconds() * 1000
    assert uncached["embed"] > 0 and uncached["search"] > 0
    embeds = o.metric("photosearch_request_stage_seconds_count", stage="embed", **route)
    assert embeds - embeds_before == 1
    # Image search and more-like-this name theirs too.
    image = _timings(o.image(7))
    assert {"decode", "embed", "search", "total"} <= set(image)
    similar = httpx.get(f"{o.server.url}/v1/photos/{o.photo_ids[1]}/similar", headers=SEARCH)
    assert {"retrieve", "search", "total"} <= set(_timings(similar))
