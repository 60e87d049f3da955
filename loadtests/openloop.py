"""Open-loop load over HTTP (aiohttp) and each phase's latencies.

Open loop: each request leaves at its scheduled time whether or not the earlier ones have
answered, and its latency counts from that scheduled time, so queueing shows. The client is
aiohttp's: this process shares the cores with the API and Triton, and an aiohttp request costs
it about 0.2 ms of CPU where an httpx one costs 2-4 ms, which at 100/s would show up as the
load generator's own lag in every latency.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
import numpy as np

from core.embedding.manifest import TEXT_MODEL
from harness.observe import Metrics, fetch_text
from query_api.http.timing import STAGES

REQUEST_TIMEOUT_S = 10.0
SEARCH_ROUTE = "/v1/search"
OPERATOR_KEY = "ps_bench-operator"  # the benchmark's own API, on loopback, for its run only
PAUSE_S = 1.0  # between phases, so one phase's tail does not fall into the next
LIMIT = 20  # results per search, as the page asks


def search_target(query: str, **params: object) -> str:
    """A text search's path; `params` are more of its parameters (a list repeats one)."""
    return "/v1/search?" + urlencode({"q": query, "limit": LIMIT, **params}, doseq=True)


@dataclass
class Outcome:
    latency_s: float  # from the scheduled send time to the whole body
    lag_s: float  # how late the load generator sent it
    done_at: float  # loop time of the answer
    status: int  # 0: no HTTP answer
    cached: bool | None = None
    took_ms: float | None = None
    error: str = ""
    stages: dict[str, float] = field(default_factory=dict)  # Server-Timing: stage -> ms


@dataclass(frozen=True)
class Request:
    """A POST of `target` with a body: JSON, or a form made for each send (a form's file
    part is read as it is sent). A bare target string is a GET."""

    target: str
    json: dict[str, Any] | None = None
    form: Callable[[], aiohttp.FormData] | None = None

    def body(self) -> dict[str, Any]:
        return {"json": self.json} if self.form is None else {"data": self.form()}


def server_timing(header: str) -> dict[str, float]:
    """The stages of a Server-Timing header (query_api/http/timing.py writes it): name -> ms."""
    stages: dict[str, float] = {}
    for part in header.split(","):
        name, *params = (p.strip() for p in part.split(";"))
        for param in params:
            if name and param.startswith("dur="):
                stages[name] = float(param[4:])
    return stages


async def one_request(client: aiohttp.ClientSession, target: str | Request, at: float) -> Outcome:
    loop = asyncio.get_running_loop()
    lag = loop.time() - at
    try:
        if isinstance(target, Request):
            answer = client.post(target.target, **target.body())
        else:
            answer = client.get(target)
        async with answer as response:
            status, body = response.status, await response.read()
            timing = response.headers.get("Server-Timing", "")
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        now = loop.time()
        return Outcome(now - at, lag, now, 0, error=f"{type(exc).__name__}: {exc}"[:200])
    now = loop.time()
    if status != 200:
        error = f"{status}: {body[:200].decode(errors='replace')}"
        return Outcome(now - at, lag, now, status, error=error)
    data = json.loads(body)
    took = data.get("took_ms")
    return Outcome(
        now - at, lag, now, 200, bool(data.get("cached")), took, stages=server_timing(timing)
    )


def keep_alive(url: str, connections: int, headers: dict[str, str]) -> aiohttp.ClientSession:
    """Keep-alive connections to `url`, at most `connections` requests in flight (more wait
    for a connection, and that counts in their latency)."""
    return aiohttp.ClientSession(
        url,
        headers=headers,
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
    )


async def warm(client: aiohttp.ClientSession, count: int) -> None:
    """Have `count` keep-alive connections open before a phase (a GET /healthz on each, all at
    once), so that its first requests do not pay for connecting."""

    async def one() -> None:
        async with client.get("/healthz") as response:
            await response.read()

    await asyncio.gather(*(one() for _ in range(count)))


async def send(
    client: aiohttp.ClientSession, rate: float, targets: Sequence[str | Request]
) -> list[Outcome]:
    """One request per target at `rate`/s on a fixed schedule (open loop); all the outcomes."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    tasks = []
    for i, target in enumerate(targets):
        at = start + i / rate
        if (delay := at - loop.time()) > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one_request(client, target, at)))
    return list(await asyncio.gather(*tasks))


@dataclass(frozen=True)
class Probe:
    """The API's and Triton's /metrics, read before and after a phase: where the time went."""

    api_url: str
    triton_url: str

    async def snapshot(self) -> tuple[Metrics, Metrics]:
        api = await asyncio.to_thread(fetch_text, self.api_url)
        return Metrics(api), Metrics(await asyncio.to_thread(fetch_text, self.triton_url))

    @staticmethod
    def breakdown(
        before: tuple[Metrics, Metrics], after: tuple[Metrics, Metrics]
    ) -> dict[str, float]:
        """Means per request over the phase (NaN where nothing was counted)."""

        def delta(which: int, name: str, **labels: str) -> float:
            return after[which](name, **labels) - before[which](name, **labels)

        def ratio(num: float, den: float, scale: float) -> float:
            return num / den * scale if den else float("nan")

        requests = delta(1, "nv_inference_request_success", model=TEXT_MODEL)
        executions = delta(1, "nv_inference_exec_count", model=TEXT_MODEL)
        out = {"batch": ratio(requests, executions, 1)}
        # Server-Timing's stages, as the API's histograms count them: the mean of each over
        # the searches that had it (a cached search has no embed stage).
        for stage in (*STAGES, "other", "total"):
            labels = {"route": SEARCH_ROUTE, "stage": stage}
            out[f"stage_{stage}_ms"] = ratio(
                delta(0, "photosearch_request_stage_seconds_sum", **labels),
                delta(0, "photosearch_request_stage_seconds_count", **labels),
                1000,
            )
        for key, name in (
            ("triton_request_ms", "nv_inference_request_duration_us"),
            ("triton_queue_ms", "nv_inference_queue_duration_us"),
            ("triton_infer_ms", "nv_inference_compute_infer_duration_us"),
        ):
            out[key] = ratio(delta(1, name, model=TEXT_MODEL), requests, 1 / 1000)
        return out


@dataclass
class Phase:
    name: str
    rate: float
    expect_cached: bool
    outcomes: list[Outcome]
    breakdown: dict[str, float]

    @property
    def errors(self) -> int:
        return sum(o.status != 200 for o in self.outcomes)

    @property
    def wrong_cache(self) -> int:
        return sum(o.status == 200 and o.cached != self.expect_cached for o in self.outcomes)

    @property
    def achieved(self) -> float:
        """Answers per second, from the first answer to the last."""
        done = sorted(o.done_at for o in self.outcomes if o.status)
        return (len(done) - 1) / (done[-1] - done[0]) if len(done) > 1 else float("nan")

    def of(self, status: int) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]

    def goodput(self, seconds: float) -> float:
        return len(self.of(200)) / seconds

    def ms(self, q: float, outcomes: list[Outcome] | None = None) -> float:
        """A latency percentile of the phase's outcomes, or of `outcomes` (NaN: none)."""
        chosen = self.outcomes if outcomes is None else outcomes
        if not chosen:
            return float("nan")
        return float(np.percentile([o.latency_s for o in chosen], q)) * 1000

    def server_p50_ms(self) -> float:
        took = [o.took_ms for o in self.outcomes if o.took_ms is not None]
        return float(np.median(took)) if took else float("nan")

    def lag_p99_ms(self) -> float:
        """How late the generator sent its requests (counted in every latency)."""
        return float(np.percentile([o.lag_s for o in self.outcomes], 99)) * 1000

    def stage_p50_ms(self, stage: str) -> float:
        """The median of a Server-Timing stage over the answers that had it (NaN: none)."""
        spent = [o.stages[stage] for o in self.outcomes if stage in o.stages]
        return float(np.median(spent)) if spent else float("nan")

    def holds(self, p99_ms: float) -> bool:
        """No errors, every answer cached or not as expected, and p99 within p99_ms."""
        return self.errors == 0 and self.wrong_cache == 0 and self.ms(99) <= p99_ms


async def run_phase(
    http: aiohttp.ClientSession,
    probe: Probe | None,
    name: str,
    rate: float,
    targets: Sequence[str | Request],
    expect_cached: bool = False,
    *,
    warm_connections: int = 32,
    pause_s: float = PAUSE_S,
) -> Phase:
    """One phase: warm the connections, send the targets at `rate`/s open loop, read where the
    time went (`probe`'s /metrics before and after), print its errors, pause after it."""
    await warm(http, min(warm_connections, len(targets)))
    before = await probe.snapshot() if probe is not None else None
    outcomes = await send(http, rate, targets)
    breakdown = Probe.breakdown(before, await probe.snapshot()) if probe and before else {}
    phase = Phase(name, rate, expect_cached, outcomes, breakdown)
    for error in sorted({o.error for o in outcomes if o.error})[:3]:
        print(f"    error: {error}", flush=True)
    await asyncio.sleep(pause_s)
    return phase
