"""Locust users of PhotoSearch, driven by a plan that `python -m loadtests.run` writes.

Run by that command in a Locust process of its own (gevent patches the standard library as
Locust is imported, which the tests' and the runner's processes must not see):

    locust -f loadtests/locustfile.py --headless ...   with PHOTOSEARCH_LOADTEST_PLAN=plan.json

Each user thinks for an exponentially distributed time between requests, so the sum of many
users arrives as a Poisson stream at the planned rate, as independent people do. Besides
Locust's own reports (statistics and their history by kind, charts over time), every request
is written to the plan's CSV with its start time, latency, status and error: the report's
windows (before, during and after a sync; per minute) and exact percentiles of the answered
requests need each request's start.
"""

from __future__ import annotations

import csv
import os
import random
import time
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

from locust import FastHttpUser, events, task
from locust.contrib.fasthttp import ResponseContextManager

from loadtests.records import FIELDS
from loadtests.scenario import Kind, KindMix, Plan, QueryMix, UserGroup

PLAN = Plan.model_validate_json(Path(os.environ["PHOTOSEARCH_LOADTEST_PLAN"]).read_text())
QUERIES = QueryMix(PLAN.scenario.queries, salt=PLAN.salt)
IMAGES = [Path(p).read_bytes() for p in PLAN.images]
SINK = open(PLAN.records, "w", newline="")  # open for the whole run
RECORDS = csv.writer(SINK)
RECORDS.writerow(FIELDS)


def _started(**_: Any) -> None:
    # The runner's clock for the timeline: the sync's start and the soak's minutes count from here.
    Path(PLAN.started).write_text(f"{time.time():.6f}")


def _stopped(**_: Any) -> None:
    SINK.close()


def _record(
    response_time: float,
    response: Any,
    context: dict[str, Any],
    exception: Exception | None,
    start_time: float,
    **_: Any,
) -> None:
    if "kind" in context and not SINK.closed:
        status = getattr(response, "status_code", 0) or 0
        row = [f"{start_time:.6f}", context["kind"], f"{response_time:.3f}", status]
        error = "" if exception is None else str(exception)[:200]
        RECORDS.writerow([*row, error])


events.test_start.add_listener(_started)
events.test_stop.add_listener(_stopped)
events.request.add_listener(_record)


def _check(resp: ResponseContextManager) -> None:
    """A search answered when it is a 200 with a results list; else a failure with the
    API's own message."""
    if resp.status_code != 200:
        body = (resp.text or "")[:200] if resp.status_code else ""
        resp.failure(f"{resp.status_code}: {body}" if body else str(getattr(resp, "error", "")))
        return
    try:
        len(resp.json()["results"])
    except (ValueError, KeyError, TypeError) as exc:
        resp.failure(f"not a search answer: {exc!r}")
        return
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

    def _get(self, kind: Kind, path: str, **kwargs: Any) -> None:
        with self.client.request(
            "POST" if kind == "image" else "GET",
            path,
            name=kind,
            headers={"X-API-Key": PLAN.api_key} if PLAN.api_key and self.group.keyed else {},
            context={"kind": kind},
            catch_response=True,
            **kwargs,
        ) as resp:
            _check(resp)


class SiteVisitor(_Planned):
    """Someone on the site, searching by words without a key, as the page does."""

    group = PLAN.groups["text"]
    fixed_count = weight = group.users

    @task
    def search(self) -> None:
        self._get("text", "/v1/search?" + urlencode({"q": QUERIES.next()[0], "limit": PLAN.limit}))


class InternalApp(_Planned):
    """An internal application with its own key: image search and "more like this"."""

    group = PLAN.groups["internal"]
    fixed_count = weight = group.users

    def on_start(self) -> None:
        super().on_start()
        shares: dict[Kind, float] = {k: v for k, v in PLAN.scenario.shares().items() if k != "text"}
        self._kinds = KindMix(shares, self._rng.getrandbits(32))

    @task
    def call(self) -> None:
        if self._kinds.next() == "image":
            image = IMAGES[self._rng.randrange(len(IMAGES))]
            files = {"file": ("photo.jpg", image, "image/jpeg")}
            self._get("image", f"/v1/search/image?limit={PLAN.limit}", files=files)
        else:
            photo = quote(self._rng.choice(PLAN.photo_ids), safe="/")
            self._get("similar", f"/v1/photos/{photo}/similar?limit={PLAN.limit}")


# A group the plan leaves empty must not run at all (Locust would still start one user).
SiteVisitor.abstract = SiteVisitor.group.users == 0
InternalApp.abstract = InternalApp.group.users == 0
