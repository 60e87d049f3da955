"""Every search has a bounded cost and the caller pays for it, against the running API (real
Triton, Redis and Qdrant Edge): the outside tester's F1, F2 and F8 of issue 33.

F1: a deep diversified page is refused naming the cap; re-ranking runs on the replica's
ranking thread, so while it is held `/healthz` and other searches answer, and past its
deadline the search is a 503. F2: a search spends a token per embedding. F8: a photo's
duplicates come a page at a time and are rate limited.

The ranking thread is held by a job the test submits to it and releases with an event (it
stands for a long re-rank): what answers while it is held is asserted, never a duration.
Limits are slow (one token per 100 s) so that nothing refills while a test runs.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import Settings
from core.vectorstore import GROUP_FIELD, VectorStore
from model.triton_server import TritonServer
from query_api.http.auth import hash_key
from query_api.services import Services
from tests.support.api import (
    KEYS,
    SEARCH_KEY,
    ApiServer,
    Indexed,
    api_settings,
    index_photos,
    metric,
    own_store,
    serving,
)
from tests.support.waiting import wait_until

SLOW = 0.01  # tokens a second: one per 100 s
COSTS, CAPPED = "ps_test-costs", "ps_test-capped"
LIMITS: dict[str, Any] = {
    "keys": [
        *KEYS,
        {"name": "costs", "sha256": hash_key(COSTS), "rate_per_s": SLOW, "burst": 10},
        {"name": "capped", "sha256": hash_key(CAPPED), "rate_per_s": SLOW, "burst": 10},
    ],
    "anonymous_search": True,
    "anonymous_rate_per_s": SLOW,
    "anonymous_burst": 3,
    "rerank_threads": 1,
    "rerank_timeout_s": 120,  # bounds a hang only; the deadline test has its own server
}
HANG_S = 120
GROUP = [f"photo{i:03d}.jpg" for i in range(8)]  # one near-duplicate group of 8
_R = re.compile(r'^"search";r=(\d+);t=\d+$')


@dataclass
class Stack:
    settings: Settings
    store: VectorStore
    server: ApiServer
    indexed: Indexed

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def services(self) -> Services:
        services: Services = self.server.app.state.services
        return services


@pytest.fixture(scope="module")
def stack(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("cost")
    settings = api_settings(tmp / "data", triton.url, repository, **LIMITS)
    with own_store(settings) as store:
        indexed = index_photos(store, settings, tmp / "photos", 12)
        store.set_payloads(indexed.collection, {pid: {GROUP_FIELD: GROUP[0]} for pid in GROUP})
        with serving(settings, store) as server:
            yield Stack(settings, store, server, indexed)


def search(url: str, key: str | None = None, **params: Any) -> httpx.Response:
    headers = {"X-API-Key": key} if key else {}
    return httpx.get(
        url + "/v1/search", params={"q": "a cat", **params}, headers=headers, timeout=HANG_S
    )


def remaining(answer: httpx.Response) -> int:
    match = _R.match(answer.headers["ratelimit"])
    assert match, answer.headers["ratelimit"]
    return int(match[1])


@dataclass
class Held:
    """The ranking thread of a replica, held by a job of the test until `release`."""

    release: threading.Event


@pytest.fixture
def held(stack: Stack) -> Iterator[Held]:
    release = threading.Event()
    job = stack.services.reranking.executor.submit(release.wait, HANG_S)
    try:
        yield Held(release)
    finally:
        release.set()
        job.result(HANG_S)


TESTERS_PAGE = {"collapse": "false", "diversity": "0.5", "offset": 10_000, "limit": 100}


def test_a_deep_diversified_page_is_refused_naming_the_cap_and_costs_nothing(
    stack: Stack,
) -> None:
    refused = search(stack.url, CAPPED, **TESTERS_PAGE)
    assert refused.status_code == 422, refused.text
    message = refused.json()["message"]
    assert "diversity re-ranks the first 1000 results at most" in message
    assert "PHOTOSEARCH_API__DIVERSITY_WINDOW" in message
    # The same depth without diversity is answered, and priced: the query's embedding and
    # ten thousands re-ranked, 11, above the bucket's 10: all of it. The refusal above took
    # nothing, or this would have been a 429.
    deep = search(stack.url, CAPPED, offset=10_000, limit=100)
    assert deep.status_code == 200, deep.text
    assert remaining(deep) == 0
    assert search(stack.url, CAPPED).status_code == 429
    # Within the window, diversity answers.
    assert search(stack.url, SEARCH_KEY, diversity="0.5", limit=5).status_code == 200


def test_while_a_re_rank_holds_the_thread_health_and_other_searches_answer(
    stack: Stack, held: Held
) -> None:
    reranking = stack.services.reranking
    with ThreadPoolExecutor(1) as pool:
        diverse = pool.submit(search, stack.url, SEARCH_KEY, diversity="0.5", limit=5)
        wait_until(lambda: reranking.pending == 1, HANG_S, "the search waiting for a thread")
        assert httpx.get(stack.url + "/healthz").status_code == 200
        plain = search(stack.url, SEARCH_KEY, q="a dog", mode="vector", collapse="false")
        default = search(stack.url, SEARCH_KEY, q="a bird")  # hybrid, collapsed: a pool of 100
        assert (plain.status_code, default.status_code) == (200, 200), default.text
        assert not diverse.done()  # all of that answered while the re-rank waited
        held.release.set()
        answer = diverse.result(HANG_S)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["results"]) == 5


def test_past_its_deadline_a_re_rank_is_a_503_with_retry_after(stack: Stack) -> None:
    api = stack.settings.api.model_copy(update={"rerank_timeout_s": 0.2})
    with serving(stack.settings.model_copy(update={"api": api}), stack.store) as server:
        services: Services = server.app.state.services
        release = threading.Event()
        job = services.reranking.executor.submit(release.wait, HANG_S)
        try:
            late = search(server.url, SEARCH_KEY, diversity="0.5")
        finally:
            release.set()
            job.result(HANG_S)
        assert late.status_code == 503, late.text
        assert late.json()["error"] == "rerank_timeout"
        assert late.headers["Retry-After"] == str(api.retry_after_s)
        refused = metric(server.metrics_url, "photosearch_overload_refused_total", kind="rerank")
        assert refused == 1
        assert search(server.url, SEARCH_KEY, diversity="0.5").status_code == 200


def test_a_search_with_five_long_nots_spends_a_token_per_embedding(stack: Stack) -> None:
    nots = [(f"{n} " + "a very long unwanted description " * 20)[:500] for n in range(5)]
    embeds = "photosearch_triton_request_duration_seconds_count"
    before = metric(stack.server.metrics_url, embeds, model="text")
    heavy = search(stack.url, COSTS, q="a red bicycle on a pier", **{"not": nots})
    assert heavy.status_code == 200, heavy.text
    # Six embeddings made (uncached), six tokens spent.
    assert metric(stack.server.metrics_url, embeds, model="text") - before == 6
    assert remaining(heavy) == 10 - 6
    assert remaining(search(stack.url, COSTS, q="a blue boat at dawn")) == 3
    # Another costs 6 of the 3 left: refused, naming its price, and nothing is taken.
    again = search(stack.url, COSTS, q="a green tree in snow", **{"not": nots})
    assert again.status_code == 429, again.text
    assert "this search costs 6" in again.json()["message"]
    assert remaining(again) == 3
    # Cached embeddings cost the same: the price never tells what others searched.
    assert remaining(search(stack.url, COSTS, q="a blue boat at dawn")) == 2


def test_a_photos_duplicates_come_a_page_at_a_time_and_are_rate_limited(stack: Stack) -> None:
    url = f"{stack.url}/v1/photos/{GROUP[3]}/duplicates"
    assert httpx.get(url, params={"limit": 101}).status_code == 422  # costs nothing
    pages, offset = [], 0
    while offset is not None:
        answer = httpx.get(url, params={"limit": 3, "offset": offset})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["count"] == 7 and len(body["photos"]) <= 3
        pages.append([p["id"] for p in body["photos"]])
        offset = body["next_offset"]
    assert pages == [GROUP[:3], [GROUP[4], GROUP[5], GROUP[6]], [GROUP[7]]]
    assert remaining(answer) == 0  # anonymous: a burst of 3, one token a page
    refused = httpx.get(url)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert "too many searches from this address" in refused.json()["message"]
