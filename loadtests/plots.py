"""The report's PNG plots: latency percentiles, throughput, and Triton's batching over time."""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server or in CI

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadtests.observe import MODELS, Sample
from loadtests.records import Series

Span = tuple[float, float] | None
SYNC_COLOR = "#f2c14e"


def _sync(ax: Axes, span: Span) -> None:
    if span is not None:
        ax.axvspan(span[0], span[1], color=SYNC_COLOR, alpha=0.3, label="nightly sync")


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency(path: Path, s: Series, span: Span) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    mid = s.t + (s.t[1] - s.t[0] if len(s.t) > 1 else 0) / 2
    for values, label, style in ((s.p50, "p50", "-"), (s.p90, "p90", "--"), (s.p99, "p99", ":")):
        ax.plot(mid, values, style, marker=".", label=label)
    _sync(ax, span)
    ax.set_xlabel("seconds into the load")
    ax.set_ylabel("latency, ms (answered requests)")
    ax.set_title("Latency percentiles per window")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    _save(fig, path)


def throughput(path: Path, s: Series, span: Span) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = np.zeros(len(s.t))
    for kind, rate in s.rate.items():
        ax.bar(s.t, rate, width=1.0, bottom=bottom, align="edge", label=f"{kind} answered")
        bottom += rate
    if s.error_rate.any():
        ax.bar(
            s.t, s.error_rate, width=1.0, bottom=bottom, align="edge", color="red", label="errors"
        )
    _sync(ax, span)
    ax.set_xlabel("seconds into the load")
    ax.set_ylabel("requests per second")
    ax.set_title("Throughput per second, by kind of request")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="upper left", ncol=2)
    _save(fig, path)


def triton(path: Path, samples: list[Sample], t0: float, span: Span) -> None:
    """Mean batch size and queue time per request between two readings of Triton's counters."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    for kind in MODELS:
        keys = [f"{kind}_{k}" for k in ("requests", "executions", "queue_us")]
        points = [p for p in samples if all(k in p.values for k in keys)]
        t, batch, queue = [], [], []
        for a, b in itertools.pairwise(points):
            requests = b.values[keys[0]] - a.values[keys[0]]
            executions = b.values[keys[1]] - a.values[keys[1]]
            if requests > 0 and executions > 0:
                t.append((a.at + b.at) / 2 - t0)
                batch.append(requests / executions)
                queue.append((b.values[keys[2]] - a.values[keys[2]]) / requests / 1000)
        top.plot(t, batch, marker=".", label=kind)
        bottom.plot(t, queue, marker=".", label=kind)
    for ax in (top, bottom):
        _sync(ax, span)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left")
    top.set_ylabel("mean batch size")
    top.set_title("Triton: dynamic batching over time")
    bottom.set_ylabel("mean queue time, ms")
    bottom.set_xlabel("seconds into the load")
    _save(fig, path)
