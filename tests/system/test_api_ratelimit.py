"""Rate limits against the running API: per key, shared by two API processes on one Redis,
per client address behind a trusted load balancer, and failing open when Redis dies.

Limits are slow (one search per 100 s) so that nothing refills while a test runs: the
answers are counted, never timed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import Settings
from core.vectorstore import open_store
from harness.processes import free_ports
from model.triton_server import TritonServer
from photosearch.up.probes import http_ok
from query_api.http.auth import hash_key
from tests.support.api import (
    KEYS,
    SEARCH_KEY,
    ApiServer,
    Indexed,
    api_settings,
    index_photos,
    metric,
    serving,
)
from tests.support.images import encode
from tests.support.indexing import drop_keys, env_of, variant
from tests.support.qdrant_server import qdrant_stand_in
from tests.support.redisserver import RedisServer
from tests.support.waiting import wait_until

LIMITED, OTHER, SHARED = "ps_test-limited", "ps_test-other", "ps_test-shared"
SLOW = 0.01  # searches a second: one per 100 s
LIMITED_KEYS = [
    *KEYS,
    {"name": "limited", "sha256": hash_key(LIMITED), "rate_per_s": SLOW, "burst": 3},
    {"name": "other", "sha256": hash_key(OTHER), "rate_per_s": SLOW, "burst": 3},
    {"name": "shared", "sha256": hash_key(SHARED), "rate_per_s": SLOW, "burst": 4},
]
BALANCER = "127.0.0.2"  # the load balancer's address; the tests' direct calls come from .1
LIMITS: dict[str, Any] = {
    "keys": LIMITED_KEYS,
    "anonymous_search": True,
    "anonymous_rate_per_s": SLOW,
    "anonymous_burst": 2,
    "trusted_proxies": [f"{BALANCER}/32"],
}
_R = re.compile(r'^"search";r=(\d+);t=(\d+)$')


@dataclass
class Stack:
    settings: Settings
    server: ApiServer
    indexed: Indexed

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def stack(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The API over a Qdrant server (the stand-in), which a second API process can share."""
    tmp = tmp_path_factory.mktemp("ratelimit")
    with qdrant_stand_in() as qdrant_url:
        base = api_settings(tmp / "data", triton.url, repository, **LIMITS)
        settings = base.model_copy(
            update={"qdrant": base.qdrant.model_copy(update={"url": qdrant_url})}
        )
        store = open_store(settings)
        try:
            indexed = index_photos(store, settings, tmp / "photos", 6)
        finally:
            store.close()
        try:
            with serving(settings) as server:
                yield Stack(settings, server, indexed)
        finally:
            drop_keys(settings)


def search(url: str, key: str | None = None, **headers: str) -> httpx.Response:
    if key is not None:
        headers["X-API-Key"] = key
    return httpx.get(url + "/v1/search", params={"q": "a cat", "limit": 3}, headers=headers)


def remaining(answer: httpx.Response) -> int:
    """r of the RateLimit field: the searches left."""
    match = _R.match(answer.headers["ratelimit"])
    assert match, answer.headers["ratelimit"]
    return int(match[1])


def test_a_key_past_its_burst_gets_429_and_other_keys_are_unaffected(stack: Stack) -> None:
    answers = [search(stack.url, LIMITED) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [remaining(a) for a in answers] == [2, 1, 0, 0]
    assert all(a.headers["ratelimit-policy"] == '"search";q=3;w=300' for a in answers)

    refused = answers[3]
    assert refused.json()["error"] == "rate_limited"
    assert "too many searches from the key 'limited'" in refused.json()["message"]
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= 1 / SLOW  # one search refills in 100 s at most
    assert refused.headers["ratelimit"] == f'"search";r=0;t={retry_after}'

    # Image search and "more like this" spend from the same bucket; photos do not.
    photo = stack.indexed.ids[0]
    image = httpx.post(
        stack.url + "/v1/search/image",
        files={"file": ("q.jpg", encode(variant(1, 64), "JPEG"), "image/jpeg")},
        headers={"X-API-Key": LIMITED},
    )
    similar = httpx.get(f"{stack.url}/v1/photos/{photo}/similar", headers={"X-API-Key": LIMITED})
    assert (image.status_code, similar.status_code) == (429, 429)
    thumbnail = httpx.get(
        f"{stack.url}/v1/photos/{photo}/thumbnail", headers={"X-API-Key": LIMITED}
    )
    assert thumbnail.status_code == 200 and "ratelimit" not in thumbnail.headers

    # Another limited key has a bucket of its own; a key without a limit has none.
    other = search(stack.url, OTHER)
    assert other.status_code == 200 and remaining(other) == 2
    unlimited = [search(stack.url, SEARCH_KEY) for _ in range(5)]
    assert {a.status_code for a in unlimited} == {200}
    assert not any("ratelimit" in a.headers for a in unlimited)

    # An unknown key is refused before any bucket: 401, never 429.
    assert search(stack.url, "ps_no-such-key").status_code == 401

    metrics = stack.server.metrics_url
    assert metric(metrics, "photosearch_rate_limited_total", key="limited") == 3
    assert metric(metrics, "photosearch_rate_limited_total", key="other") == 0


def test_callers_without_a_key_are_limited_per_address_named_by_a_trusted_balancer(
    stack: Stack,
) -> None:
    metrics = stack.server.metrics_url
    refused_before = metric(metrics, "photosearch_rate_limited_total", key="anonymous")
    with httpx.Client(transport=httpx.HTTPTransport(local_address=BALANCER)) as balancer:

        def via_balancer(forwarded_for: str) -> int:
            answer = balancer.get(
                stack.url + "/v1/search",
                params={"q": "a cat", "limit": 3},
                headers={"X-Forwarded-For": forwarded_for},
            )
            return answer.status_code

        assert [via_balancer("203.0.113.7") for _ in range(3)] == [200, 200, 429]
        # The client wrote an address of its own left of the one the balancer appended:
        # only the balancer's is believed.
        assert via_balancer("198.51.100.1, 203.0.113.7") == 429
        # Another client behind the same balancer has a bucket of its own.
        assert via_balancer("203.0.113.8") == 200

    # Straight from 127.0.0.1, not a trusted proxy: the header is the caller's own writing,
    # ignored however it changes; the connection's address is the bucket.
    direct = [search(stack.url, **{"X-Forwarded-For": f"192.0.2.{n}"}) for n in range(3)]
    assert [a.status_code for a in direct] == [200, 200, 429]
    refused = search(stack.url)
    assert refused.status_code == 429
    assert "too many searches from this address" in refused.json()["message"]

    assert metric(metrics, "photosearch_rate_limited_total", key="anonymous") == refused_before + 4
    # One label for every caller without a key, never a series per address.
    assert "203.0.113" not in httpx.get(metrics).text


class ApiProcess:
    """`photosearch api serve` with the stack's settings, in its own process group."""

    def __init__(self, settings: Settings, log: Path) -> None:
        self.port, self.metrics_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        api = settings.api.model_dump(mode="json") | {"metrics_port": self.metrics_port}
        self.env = env_of(
            settings,
            {
                f"PHOTOSEARCH_API__{name.upper()}": v if isinstance(v, str) else json.dumps(v)
                for name, v in api.items()
                if v is not None  # unset: "null" would be a value (a log file named null)
            },
        )
        self.log = log

    def __enter__(self) -> ApiProcess:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "photosearch", "api", "serve", f"--port={self.port}"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"the API exited:\n{self.log.read_text()[-3000:]}")
            return http_ok(self.url + "/readyz")

        try:
            wait_until(ready, 120, lambda: f"the API ready:\n{self.log.read_text()[-3000:]}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def test_two_api_processes_spend_from_one_bucket_per_key(stack: Stack, tmp_path: Path) -> None:
    with ApiProcess(stack.settings, tmp_path / "api.log") as second:
        first = stack.url
        answers = [search(url, SHARED) for url in (first, second.url, first, second.url)]
        assert [a.status_code for a in answers] == [200] * 4
        # One count across both: each process saw the other's searches.
        assert [remaining(a) for a in answers] == [3, 2, 1, 0]
        assert search(first, SHARED).status_code == 429
        assert search(second.url, SHARED).status_code == 429
        assert metric(second.metrics_url, "photosearch_rate_limited_total", key="shared") == 1
    assert metric(stack.server.metrics_url, "photosearch_rate_limited_total", key="shared") == 1


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def test_redis_down_the_limits_fail_open_and_count_it_then_return(
    stack: Stack, private_redis: RedisServer
) -> None:
    base = stack.settings
    redis = base.redis.model_copy(update={"url": private_redis.url})
    api = base.api.model_copy(update={"redis_retry_s": 0.5})
    settings = base.model_copy(update={"redis": redis, "api": api})
    with serving(settings) as server:
        assert [search(server.url, LIMITED).status_code for _ in range(4)] == [200] * 3 + [429]

        private_redis.stop()
        answers = [search(server.url, LIMITED) for _ in range(3)]
        # Answered, unchecked: no RateLimit fields, since nothing was counted.
        assert [a.status_code for a in answers] == [200] * 3
        assert not any("ratelimit" in a.headers for a in answers)
        assert metric(server.metrics_url, "photosearch_rate_limit_fail_open_total") == 3

        # Back (empty: a full bucket): checked again once the guard tries Redis again.
        private_redis.start()

        def checked() -> httpx.Response | None:
            answer = search(server.url, LIMITED)
            assert answer.status_code == 200, answer.text
            return answer if "ratelimit" in answer.headers else None

        answer = wait_until(checked, 60, "the limits checked again after Redis's return")
        assert remaining(answer) == 2
        assert [search(server.url, LIMITED).status_code for _ in range(3)] == [200, 200, 429]
