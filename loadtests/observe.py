"""What the runner watches while the load runs: the API's and Triton's /metrics over time, and
the nightly sync it starts in the middle."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from core.embedding.manifest import IMAGE_MODEL, TEXT_MODEL
from loadtests.openloop import fetch_text
from tests.support.api import sample

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
    api = fetch_text(api_metrics)
    if api:
        for result in CACHE:
            out[f"cache_{result}"] = sample(api, "photosearch_query_cache_total", result=result)
        # The API's own calls to Triton: fewer than its misses where concurrent misses of
        # one query shared a call.
        for kind in MODELS:
            out[f"api_{kind}_calls"] = sample(
                api, "photosearch_triton_request_duration_seconds_count", model=kind
            )
    triton = fetch_text(triton_metrics) if triton_metrics else ""
    if triton:
        for kind, model in MODELS.items():
            for key, name in TRITON.items():
                out[f"{kind}_{key}"] = sample(triton, name, model=model)
    return out


@dataclass
class Sampler:
    """Reads the counters every `interval_s` on a thread of its own."""

    api_metrics: str
    triton_metrics: str | None
    interval_s: float = 2.0
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> None:
        self.samples.append(
            Sample(time.time(), read_counters(self.api_metrics, self.triton_metrics))
        )

    def start(self) -> None:
        # The first reading before any request is sent, so that the deltas count them all.
        self._read()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        # The last reading after the load, so the deltas cover every request.
        self._read()


def delta(first: Sample, last: Sample, key: str) -> float | None:
    if key not in first.values or key not in last.values:
        return None
    return last.values[key] - first.values[key]


def triton_figures(first: Sample, last: Sample, kind: str) -> dict[str, float] | None:
    """Requests, mean batch size and mean queue and compute time per request, between two
    samples; None where Triton's metrics were not read."""
    d = {key: delta(first, last, f"{kind}_{key}") for key in TRITON}
    if any(v is None for v in d.values()):
        return None
    got = {k: float(v or 0.0) for k, v in d.items()}
    requests, executions = got["requests"], got["executions"]
    nan = float("nan")
    return {
        "requests": requests,
        "executions": executions,
        "batch": requests / executions if executions else nan,
        "queue_ms": got["queue_us"] / requests / 1000 if requests else nan,
        "compute_ms": got["compute_us"] / requests / 1000 if requests else nan,
    }


def cache_figures(first: Sample, last: Sample) -> dict[str, float] | None:
    d = {r: delta(first, last, f"cache_{r}") for r in CACHE}
    if any(v is None for v in d.values()):
        return None
    hits, misses, bypass = (float(d[r] or 0.0) for r in CACHE)
    lookups = hits + misses + bypass
    return {
        "hits": hits,
        "misses": misses,
        "bypass": bypass,
        "triton_calls": float(delta(first, last, "api_text_calls") or 0.0),
        "hit_ratio": hits / lookups if lookups else float("nan"),
    }


@dataclass
class SyncWatch:
    """The sync started mid-load: when it was sent, and its job as it went."""

    job_id: str
    sent_at: float
    changes: dict[str, int]
    job: dict[str, Any] = field(default_factory=dict)
    finished_at: float | None = None
