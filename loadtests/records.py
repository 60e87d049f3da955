"""Every request of a run (the CSV the Locust process writes) and the figures drawn from it."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

FIELDS = ("start", "kind", "latency_ms", "status", "cached", "results", "error")
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Records:
    """Columns of the requests, sorted by start time (seconds since the epoch)."""

    start: Floats
    kind: npt.NDArray[np.str_]
    latency_ms: Floats
    status: npt.NDArray[np.int64]  # 0: no HTTP answer (refused, reset, timed out)
    cached: Floats  # 1 or 0 for an answered text search, else NaN
    error: npt.NDArray[np.str_]  # why a request failed; "" for a 200

    def __len__(self) -> int:
        return len(self.start)

    @property
    def ok(self) -> npt.NDArray[np.bool_]:
        ok: npt.NDArray[np.bool_] = self.status == 200
        return ok

    def where(self, mask: npt.NDArray[np.bool_]) -> Records:
        return Records(
            self.start[mask],
            self.kind[mask],
            self.latency_ms[mask],
            self.status[mask],
            self.cached[mask],
            self.error[mask],
        )

    def of(self, kind: str) -> Records:
        return self.where(self.kind == kind)

    def between(self, t0: float, t1: float) -> Records:
        return self.where((self.start >= t0) & (self.start < t1))

    def error_counts(self) -> Counter[str]:
        return Counter(str(e) for e in self.error[~self.ok])


def read(path: Path) -> Records:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {FIELDS}")
        rows = sorted(reader, key=lambda r: float(r["start"]))
    return Records(
        np.array([float(r["start"]) for r in rows], dtype=np.float64),
        np.array([r["kind"] for r in rows], dtype=np.str_),
        np.array([float(r["latency_ms"]) for r in rows], dtype=np.float64),
        np.array([int(r["status"]) for r in rows], dtype=np.int64),
        np.array([float(r["cached"]) if r["cached"] else np.nan for r in rows], dtype=np.float64),
        np.array(
            ["" if r["status"] == "200" else r["error"] or f"status {r['status']}" for r in rows],
            dtype=np.str_,
        ),
    )


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
    if len(answered) == 0:
        nan = float("nan")
        return Latency(len(records), len(records), nan, nan, nan, nan)
    p50, p90, p99 = np.percentile(answered, [50, 90, 99])
    return Latency(
        len(records),
        int((~records.ok).sum()),
        float(p50),
        float(p90),
        float(p99),
        float(answered.max()),
    )


def hit_ratio(records: Records) -> float:
    """Text searches answered from the cached embedding, over those answered."""
    known = records.cached[~np.isnan(records.cached)]
    return float(known.mean()) if len(known) else float("nan")


@dataclass(frozen=True)
class Series:
    """Figures per window of time, for the plots: t is the window's start, from the run's."""

    t: Floats
    p50: Floats
    p90: Floats
    p99: Floats
    rate: dict[str, Floats]  # answered requests per second, by kind
    error_rate: Floats  # failed requests per second


def series(records: Records, t0: float, duration_s: float, window_s: float) -> Series:
    edges = np.arange(0.0, duration_s + window_s, window_s)
    rel = records.start - t0
    which = np.digitize(rel, edges) - 1
    n = len(edges) - 1
    pct = np.full((3, n), np.nan)
    for i in range(n):
        values = records.latency_ms[(which == i) & records.ok]
        if len(values):
            pct[:, i] = np.percentile(values, [50, 90, 99])
    rate = {
        str(kind): np.bincount(
            which[(records.kind == kind) & records.ok & (which < n)], minlength=n
        )[:n]
        / window_s
        for kind in sorted(set(records.kind.tolist()))
    }
    failed = np.bincount(which[~records.ok & (which < n) & (which >= 0)], minlength=n)[:n]
    return Series(edges[:-1], pct[0], pct[1], pct[2], rate, failed / window_s)
