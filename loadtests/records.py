"""What a load-test run measured, and the figures drawn from it: every request (requests.csv,
written by the Locust process), and the API's and Triton's counters read from their /metrics
while the load ran."""

from __future__ import annotations

import csv
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from core.embedding.manifest import IMAGE_MODEL, TEXT_MODEL
from harness.observe import Metrics, fetch_text

FIELDS = ("start", "kind", "latency_ms", "status", "error")
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Records:
    """Columns of the requests, sorted by start time (seconds since the epoch)."""

    start: Floats
    kind: npt.NDArray[np.str_]
    latency_ms: Floats
    status: npt.NDArray[np.int64]  # 0: no HTTP answer (refused, reset, timed out)
    error: npt.NDArray[np.str_]  # why a request failed; "" for a 200

    def __len__(self) -> int:
        return len(self.start)

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        ok: npt.NDArray[np.bool_] = self.status == 200
        return ok

    def where(self, mask: npt.NDArray[np.bool_]) -> Records:
        return Records(*(column[mask] for column in vars(self).values()))

    def of(self, kind: str) -> Records:
        return self.where(self.kind == kind)

    def between(self, t0: float, t1: float) -> Records:
        return self.where((self.start >= t0) & (self.start < t1))

    def error_counts(self) -> Counter[str]:
        return Counter(str(e) for e in self.error[~self.ok])


def read(path: Path) -> Records:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        if (head := tuple(next(reader, ()))) != FIELDS:
            raise ValueError(f"{path}: columns {head}, expected {FIELDS}")
        rows = sorted(reader, key=lambda r: float(r[0]))
    start, kind, latency_ms, status, error = zip(*rows, strict=True) if rows else [()] * 5
    return Records(
        np.array(start, dtype=np.float64),
        np.array(kind, dtype=np.str_),
        np.array(latency_ms, dtype=np.float64),
        np.array(status, dtype=np.int64),
        np.array([why(s, e) for s, e in zip(status, error, strict=True)], dtype=np.str_),
    )


def why(status: str, error: str) -> str:
    """Why a request failed: its error, else its status; "" for a 200."""
    return "" if status == "200" else error or f"status {status}"


@dataclass(frozen=True)
class Latency:
    """Of the answered (200) requests; NaN when there were none."""

    count: int
    errors: int
    p50: float
    p90: float
    p99: float
    max: float

    @property
    def error_share(self) -> float:
        return self.errors / self.count if self.count else 0.0


def latency(records: Records) -> Latency:
    answered = records.latency_ms[records.ok]
    errors = len(records) - len(answered)
    if len(answered) == 0:
        return Latency(len(records), errors, *[math.nan] * 4)
    p50, p90, p99 = np.percentile(answered, [50, 90, 99])
    return Latency(len(records), errors, float(p50), float(p90), float(p99), float(answered.max()))


# -- the API's and Triton's counters over the run -----------------------------------------------

MODELS = {"text": TEXT_MODEL, "image": IMAGE_MODEL}
# Triton's cumulative counters per model: requests, executions (a batch is one), and the
# microseconds spent queued (dynamic batching's delay) and computing.
TRITON = {
    "requests": "nv_inference_request_success",
    "executions": "nv_inference_exec_count",
    "queue_us": "nv_inference_queue_duration_us",
    "compute_us": "nv_inference_compute_infer_duration_us",
}
CACHE = ("hit", "miss", "bypass")


@dataclass(frozen=True)
class Sample:
    """Cumulative counters read at time `at` (epoch seconds); a source that did not answer
    leaves its counters out."""

    at: float
    values: dict[str, float]


def read_counters(api_metrics: str, triton_metrics: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if api := fetch_text(api_metrics):
        api_page = Metrics(api)
        for result in CACHE:
            out[f"cache_{result}"] = api_page("photosearch_query_cache_total", result=result)
        # The API's own calls to Triton: fewer than its misses where concurrent misses of
        # one query shared a call.
        for kind in MODELS:
            out[f"api_{kind}_calls"] = api_page(
                "photosearch_triton_request_duration_seconds_count", model=kind
            )
    if triton_metrics and (triton := fetch_text(triton_metrics)):
        triton_page = Metrics(triton)
        for kind, model in MODELS.items():
            for key, name in TRITON.items():
                out[f"{kind}_{key}"] = triton_page(name, model=model)
    return out


@dataclass
class Sampler:
    """Reads the counters every `interval_s` on a thread of its own: once before the load
    (so that the deltas count every request), and once after it."""

    api_metrics: str
    triton_metrics: str | None
    interval_s: float = 2.0
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> None:
        values = read_counters(self.api_metrics, self.triton_metrics)
        self.samples.append(Sample(time.time(), values))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> Sampler:
        self._read()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()


def deltas(samples: list[Sample], keys: list[str]) -> dict[str, float] | None:
    """What the counters counted from the first sample to the last; None where one of them
    was not read."""
    if len(samples) < 2 or not all(k in s.values for s in (samples[0], samples[-1]) for k in keys):
        return None
    return {k: samples[-1].values[k] - samples[0].values[k] for k in keys}


def triton_figures(samples: list[Sample], kind: str) -> dict[str, float] | None:
    """Requests, mean batch size and mean queue and compute time per request over the run;
    None where Triton's metrics were not read."""
    d = deltas(samples, [f"{kind}_{key}" for key in TRITON])
    if d is None:
        return None
    requests, executions, queue_us, compute_us = d.values()
    return {
        "requests": requests,
        "executions": executions,
        "batch": requests / executions if executions else math.nan,
        "queue_ms": queue_us / requests / 1000 if requests else math.nan,
        "compute_ms": compute_us / requests / 1000 if requests else math.nan,
    }


def cache_figures(samples: list[Sample]) -> dict[str, float] | None:
    d = deltas(samples, [*(f"cache_{r}" for r in CACHE), "api_text_calls"])
    if d is None:
        return None
    hits, misses, bypass, calls = d.values()
    lookups = hits + misses + bypass
    return {
        "hits": hits,
        "misses": misses,
        "bypass": bypass,
        "triton_calls": calls,
        "hit_ratio": hits / lookups if lookups else math.nan,
    }
