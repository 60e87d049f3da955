"""Locust users of PhotoSearch, driven by a plan that `python -m loadtests.run` writes.

Run by that command in a Locust process of its own (gevent patches the standard library as
Locust is imported, which the tests' and the runner's processes must not see):

    locust -f loadtests/locustfile.py --headless ...   with PHOTOSEARCH_LOADTEST_PLAN=plan.json

Each user thinks for an exponentially distributed time between requests, so the sum of many
users arrives as a Poisson stream at the planned rate, as independent people do; every request
is written to the plan's CSV with its start time, latency, status and whether the query
embedding came from the cache.
"""

from __future__ import annotations

import csv
import os
import random
import time
from pathlib import Path
from typing import Any, ClassVar, TextIO
from urllib.parse import quote, urlencode

from locust import FastHttpUser, events, task
from locust.contrib.fasthttp import ResponseContextManager

from loadtests.plan import Plan, UserGroup
from loadtests.records import FIELDS
from loadtests.scenario import Kind
from loadtests.traffic import KindMix, QueryMix

PLAN = Plan.model_validate_json(Path(os.environ["PHOTOSEARCH_LOADTEST_PLAN"]).read_text())
QUERIES = QueryMix(PLAN.scenario.queries, salt=PLAN.salt)
IMAGES = [Path(p).read_bytes() for p in PLAN.images]
_sink: TextIO | None = None
_writer: Any = None


def _open_records(**_: Any) -> None:
    global _sink, _writer
    _sink = open(PLAN.records, "w", newline="")
    _writer = csv.writer(_sink)
    _writer.writerow(FIELDS)
    # The runner's clock for the timeline: the sync's start and the plots count from here.
    Path(PLAN.started).write_text(f"{time.time():.6f}")


def _close_records(**_: Any) -> None:
    if _sink is not None:
        _sink.close()


def _record(
    name: str,
    response_time: float,
    response: Any,
    context: dict[str, Any],
    exception: Exception | None,
    start_time: float,
    **_: Any,
) -> None:
    if _writer is None or "kind" not in context:
        return
    status = getattr(response, "status_code", 0) or 0
    error = "" if exception is None else str(exception)[:200]
    cached = context.get("cached")
    _writer.writerow(
        [
            f"{start_time:.6f}",
            context["kind"],
            f"{response_time:.3f}",
            status,
            "" if cached is None else int(cached),
            context.get("results", ""),
            error,
        ]
    )


events.test_start.add_listener(_open_records)
events.test_stop.add_listener(_close_records)
events.request.add_listener(_record)


def _check(resp: ResponseContextManager, kind: str) -> None:
    """A search answered when it is a 200 with a results list; else a failure with the
    API's own message."""
    meta = resp.request_meta["context"]
    if resp.status_code != 200:
        body = (resp.text or "")[:200] if resp.status_code else ""
        resp.failure(f"{resp.status_code}: {body}" if body else str(getattr(resp, "error", "")))
        return
    try:
        data = resp.json()
        results = data["results"]
    except (ValueError, KeyError, TypeError) as exc:
        resp.failure(f"not a search answer: {exc!r}")
        return
    meta["results"] = len(results)
    if kind == "text":
        # Told to an operator's (admin) key only; null for the apps' and visitors' searches.
        meta["cached"] = data.get("cached")
    resp.success()


class _Planned(FastHttpUser):
    """A group of users from the plan: its count and each user's mean rate."""

    abstract = True
    group: ClassVar[UserGroup]

    def wait_time(self) -> float:
        return random.expovariate(self.group.rate_per_user)

    def on_start(self) -> None:
        # The first request after an exponential wait too: each user is then a Poisson process
        # from the first second, and so is their sum. (A uniform first wait over one think
        # time doubled the rate by its end, as early users came back before late ones began.)
        # Locust has patched time.sleep to yield to the other users.
        self._rng = random.Random()
        time.sleep(self._rng.expovariate(self.group.rate_per_user))

    def _headers(self) -> dict[str, str]:
        return {"X-API-Key": PLAN.api_key} if PLAN.api_key and self.group.keyed else {}


class SiteVisitor(_Planned):
    """Someone on the site, searching by words without a key, as the page does."""

    group = PLAN.group("text")
    fixed_count = group.users
    weight = group.users

    @task
    def search(self) -> None:
        text, _ = QUERIES.next()
        target = "/v1/search?" + urlencode({"q": text, "limit": PLAN.limit})
        with self.client.get(
            target, name="text", context={"kind": "text"}, catch_response=True
        ) as resp:
            _check(resp, "text")


class InternalApp(_Planned):
    """An internal application with its own key: image search and "more like this"."""

    group = PLAN.group("internal")
    fixed_count = group.users
    weight = group.users

    def on_start(self) -> None:
        super().on_start()
        shares: dict[Kind, float] = {k: v for k, v in PLAN.scenario.shares().items() if k != "text"}
        self._kinds = KindMix(shares, self._rng.getrandbits(32))

    @task
    def call(self) -> None:
        if self._kinds.next() == "image":
            files = {"file": ("photo.jpg", IMAGES[self._rng.randrange(len(IMAGES))], "image/jpeg")}
            with self.client.post(
                f"/v1/search/image?limit={PLAN.limit}",
                name="image",
                files=files,
                headers=self._headers(),
                context={"kind": "image"},
                catch_response=True,
            ) as resp:
                _check(resp, "image")
        else:
            photo = quote(self._rng.choice(PLAN.photo_ids), safe="/")
            with self.client.get(
                f"/v1/photos/{photo}/similar?limit={PLAN.limit}",
                name="similar",
                headers=self._headers(),
                context={"kind": "similar"},
                catch_response=True,
            ) as resp:
                _check(resp, "similar")


# A group the plan leaves empty must not run at all (Locust would still start one user).
SiteVisitor.abstract = SiteVisitor.group.users == 0
InternalApp.abstract = InternalApp.group.users == 0
