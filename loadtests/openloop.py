"""Open-loop load over HTTP/1.1 keep-alive (asyncio), each phase's latencies, and /metrics."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import dataclass

import numpy as np

from core.embedding.manifest import TEXT_MODEL
from tests.support.api import sample as metric

REQUEST_TIMEOUT_S = 10.0


# ---------------------------------------------------------------------------------------------
# The load generator: HTTP/1.1 keep-alive over asyncio streams (light enough to leave the
# cores to the API), open loop.

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class HttpPool:
    """GET over a pool of keep-alive connections; at most `size` requests in flight."""

    def __init__(
        self, host: str, port: int, size: int, headers: dict[str, str] | None = None
    ) -> None:
        self.host, self.port = host, port
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._idle: list[Conn] = []
        self._slots = asyncio.Semaphore(size)

    async def refill(self, count: int) -> None:
        """Close the idle connections (the server may have timed them out); open `count`."""
        self.close()
        for _ in range(count):
            self._idle.append(await asyncio.open_connection(self.host, self.port))

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()

    async def get(self, target: str) -> tuple[int, bytes]:
        async with self._slots:
            for attempt in (1, 2):
                # The retry takes a new connection: other idle ones may be just as stale.
                reused = bool(self._idle) and attempt == 1
                conn = self._idle.pop() if reused else await self._open()
                try:
                    status, body, keep = await self._exchange(conn, target)
                except (ConnectionError, asyncio.IncompleteReadError):
                    conn[1].close()
                    if reused and attempt == 1:
                        continue  # a keep-alive connection the server had closed: once more
                    raise
                except BaseException:
                    conn[1].close()
                    raise
                if keep:
                    self._idle.append(conn)
                else:
                    conn[1].close()
                return status, body
        raise AssertionError("unreachable")

    async def _open(self) -> Conn:
        return await asyncio.open_connection(self.host, self.port)

    async def _exchange(self, conn: Conn, target: str) -> tuple[int, bytes, bool]:
        reader, writer = conn
        host = f"Host: {self.host}:{self.port}\r\n"
        writer.write(f"GET {target} HTTP/1.1\r\n{host}{self._extra}\r\n".encode())
        await writer.drain()
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        if headers.get("transfer-encoding") == "chunked":
            chunks = []
            while size := int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16):
                chunks.append(await reader.readexactly(size + 2))
            await reader.readuntil(b"\r\n")
            body = b"".join(c[:-2] for c in chunks)
        else:
            body = await reader.readexactly(int(headers.get("content-length", "0")))
        return status, body, headers.get("connection") != "close"


@dataclass
class Outcome:
    latency_s: float  # from the scheduled send time to the whole body
    lag_s: float  # how late the load generator sent it
    done_at: float  # loop time of the answer
    status: int  # 0: no HTTP answer
    cached: bool | None = None
    took_ms: float | None = None
    error: str = ""


async def one_request(pool: HttpPool, target: str, at: float) -> Outcome:
    loop = asyncio.get_running_loop()
    lag = loop.time() - at
    try:
        status, body = await asyncio.wait_for(pool.get(target), REQUEST_TIMEOUT_S)
    except (
        OSError,
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
        TimeoutError,
        ValueError,
    ) as exc:
        now = loop.time()
        return Outcome(now - at, lag, now, 0, error=f"{type(exc).__name__}: {exc}"[:200])
    now = loop.time()
    if status != 200:
        error = f"{status}: {body[:200].decode(errors='replace')}"
        return Outcome(now - at, lag, now, status, error=error)
    data = json.loads(body)
    return Outcome(now - at, lag, now, status, bool(data.get("cached")), data.get("took_ms"))


def fetch_text(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return ""


@dataclass(frozen=True)
class Probe:
    """The API's and Triton's /metrics, read before and after a phase: where the time went."""

    api_url: str
    triton_url: str

    async def snapshot(self) -> tuple[str, str]:
        return (
            await asyncio.to_thread(fetch_text, self.api_url),
            await asyncio.to_thread(fetch_text, self.triton_url),
        )

    @staticmethod
    def breakdown(before: tuple[str, str], after: tuple[str, str]) -> dict[str, float]:
        """Means per request over the phase (NaN where nothing was counted)."""

        def delta(which: int, name: str, **labels: str) -> float:
            return metric(after[which], name, **labels) - metric(before[which], name, **labels)

        def ratio(num: float, den: float, scale: float) -> float:
            return num / den * scale if den else float("nan")

        api_calls = delta(0, "photosearch_triton_request_duration_seconds_count", model="text")
        searches = delta(0, "photosearch_vector_search_duration_seconds_count", kind="text")
        requests = delta(1, "nv_inference_request_success", model=TEXT_MODEL)
        executions = delta(1, "nv_inference_exec_count", model=TEXT_MODEL)
        out = {
            "api_embed_ms": ratio(
                delta(0, "photosearch_triton_request_duration_seconds_sum", model="text"),
                api_calls,
                1000,
            ),
            "api_search_ms": ratio(
                delta(0, "photosearch_vector_search_duration_seconds_sum", kind="text"),
                searches,
                1000,
            ),
            "batch": ratio(requests, executions, 1),
        }
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

    def ms(self, q: float) -> float:
        return float(np.percentile([o.latency_s for o in self.outcomes], q)) * 1000

    def server_p50_ms(self) -> float:
        took = [o.took_ms for o in self.outcomes if o.took_ms is not None]
        return float(np.median(took)) if took else float("nan")

    def lag_p99_ms(self) -> float:
        return float(np.percentile([o.lag_s for o in self.outcomes], 99)) * 1000

    def holds(self, p99_ms: float) -> bool:
        """No errors, every answer cached or not as expected, and p99 within p99_ms."""
        return self.errors == 0 and self.wrong_cache == 0 and self.ms(99) <= p99_ms
