"""The report of one load-test run: report.md, summary.json for machines, and a plot of
Triton's batching. Locust's own reports lie beside them: locust.html charts the requests per
second and the latency over time, locust_*.csv holds its statistics."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server or in CI

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from harness.machine import Occasion
from loadtests.records import (
    MODELS,
    Latency,
    Records,
    Sample,
    cache_figures,
    latency,
    read,
    triton_figures,
)
from loadtests.scenario import Plan, expected_hit_ratio
from loadtests.system import SyncWatch, Target

KIND_NAMES = {
    "text": "text search (site visitors)",
    "image": "image search (internal apps)",
    "similar": "more like this (internal apps)",
}
LATENCY_HEAD = (
    "| requests | sent | answered/s | errors | p50 ms | p90 ms | p99 ms | max ms |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|"
)
LOCUST = "locust"  # Locust's --csv prefix and --html file, in the report's folder
Span = tuple[float, float] | None


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}"


def _latency_row(label: str, lat: Latency, seconds: float) -> str:
    rate = (lat.count - lat.errors) / seconds if seconds else math.nan
    return (
        f"| {label} | {lat.count} | {rate:.1f} | {lat.errors} ({lat.error_share:.1%}) | "
        f"{ms(lat.p50)} | {ms(lat.p90)} | {ms(lat.p99)} | {ms(lat.max)} |"
    )


def in_load(records: Records, t0: float, duration_s: float) -> Records:
    """The requests of the load: one sent before the end counts, however late its answer."""
    return records.between(t0, t0 + duration_s + 60)


def summarize(
    plan: Plan, records: Records, t0: float, samples: list[Sample], watch: SyncWatch | None
) -> dict[str, Any]:
    scenario = plan.scenario
    load = in_load(records, t0, scenario.duration_s)
    out: dict[str, Any] = {
        "scenario": scenario.model_dump(),
        "users": plan.users,
        "all": asdict(latency(load)),
        "kinds": {k: asdict(latency(load.of(k))) for k in KIND_NAMES if k in set(load.kind)},
        "achieved_rate": float(load.ok.sum()) / scenario.duration_s,
        "errors": dict(load.error_counts().most_common(10)),
        "cache_hit_ratio_ceiling": expected_hit_ratio(scenario.queries, len(load.of("text"))),
    }
    if len(samples) >= 2:
        out["cache"] = cache_figures(samples)
        out["triton"] = {k: triton_figures(samples, k) for k in MODELS}
    if watch is not None:
        out["sync"] = {
            "job_id": watch.job_id,
            "sent_at_s": watch.sent_at - t0,
            "finished_at_s": None if watch.finished_at is None else watch.finished_at - t0,
            "changes": watch.changes,
            "job": watch.job,
        }
    return out


def render(
    summary: dict[str, Any],
    plan: Plan,
    target: Target,
    records: Records,
    t0: float,
    watch: SyncWatch | None,
    at: Occasion,
) -> str:
    s = plan.scenario
    groups = plan.groups
    lines = [
        f"# Load test `{s.name}`: {s.rate:g} requests/s for {s.duration_s:g} s",
        "",
        f"{s.description}.",
        "",
        f"- **When**: {datetime.fromtimestamp(t0, UTC):%Y-%m-%d %H:%M:%S} UTC; "
        f"**commit** {at.commit}",
        f"- **Machine**: {at.machine}; load average {at.load:.2f} before the run",
        f"- **Target**: {target.url} ({'started by this run' if target.up else 'running'})"
        f"; Triton metrics: {target.triton_metrics or 'not known'}",
        f"- **Users**: {groups['text'].users} site visitors and {groups['internal'].users} "
        f"internal apps ({'with their own key' if plan.api_key else 'anonymous'}), each "
        "thinking an exponential time between requests (Poisson arrivals at the planned rate)",
        f"- **Queries**: {s.queries.popular} popular queries ranked by a Zipf law "
        f"(s = {s.queries.zipf_s:g}) and {s.queries.unique_share:.0%} one-off queries; "
        f"cache {'emptied first' if s.cold_cache else 'left as it was'}",
        f"- **Command**: `{at.command}`",
        "",
        "## Latency and throughput",
        "",
        "Latency is measured by Locust from sending a request to its whole answer; "
        "percentiles are of the answered (200) requests.",
        "",
        LATENCY_HEAD,
        *(
            _latency_row(KIND_NAMES[kind], Latency(**figures), s.duration_s)
            for kind, figures in summary["kinds"].items()
        ),
        _latency_row("**all**", Latency(**summary["all"]), s.duration_s),
        "",
        f"Planned {s.rate:g}/s; answered {summary['achieved_rate']:.1f}/s.",
        "",
        f"Requests per second and latency over time: Locust's report, `{LOCUST}.html`.",
        "",
        *_cache_lines(summary),
        *_triton_lines(summary),
    ]
    if watch is not None:
        lines += _sync_lines(summary, in_load(records, t0, s.duration_s), t0, watch)
    lines += ["## Errors", ""]
    if summary["errors"]:
        lines += ["| count | error |", "|---:|---|"]
        lines += [f"| {n} | `{e[:150]}` |" for e, n in summary["errors"].items()]
    else:
        lines.append("None.")
    lines += [
        "",
        "Every request is in `requests.csv`; the figures above in `summary.json`. Locust's "
        f"own report is `{LOCUST}.html`, its statistics also in `{LOCUST}_*.csv`.",
        "",
    ]
    return "\n".join(lines)


def _cache_lines(summary: dict[str, Any]) -> list[str]:
    cache = summary.get("cache")
    api = (
        "not read"
        if cache is None
        else (
            f"**{_ratio(cache['hit_ratio'])}** ({cache['hits']:.0f} hits, {cache['misses']:.0f} "
            f"misses, {cache['bypass']:.0f} bypassed; {cache['triton_calls']:.0f} calls to "
            "Triton, concurrent misses of one query sharing one)"
        )
    )
    return [
        "## Query cache",
        "",
        f"- Hit ratio from the API's metrics: {api}",
        "- The most a cold cache can reach with this query curve and this many searches "
        f"(repeats of an earlier query): {_ratio(summary['cache_hit_ratio_ceiling'])}",
        "",
    ]


def _triton_lines(summary: dict[str, Any]) -> list[str]:
    lines = ["## Triton", ""]
    triton = summary.get("triton")
    if not triton or all(v is None for v in triton.values()):
        return [*lines, "Triton's metrics were not read (give --triton-metrics).", ""]
    lines += [
        "From Triton's own counters over the run: a request is one query or one image; an "
        "execution runs one batch of them.",
        "",
        "| model | requests | executions | mean batch | mean queue ms | mean compute ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {kind} | {f['requests']:.0f} | {f['executions']:.0f} | {_ratio(f['batch'])} | "
        f"{ms(f['queue_ms'])} | {ms(f['compute_ms'])} |"
        for kind, f in triton.items()
        if f is not None
    ]
    return [*lines, "", "![Triton batch size and queue time](triton.png)", ""]


def _sync_lines(summary: dict[str, Any], load: Records, t0: float, watch: SyncWatch) -> list[str]:
    """The sync's job, and the latency before, during and after it: what it costs searches."""
    job, sync = watch.job, summary["sync"]
    finished = sync["finished_at_s"]
    took = "not finished" if finished is None else f"{finished - sync['sent_at_s']:.1f} s"
    end = t0 + summary["scenario"]["duration_s"]
    stop = watch.finished_at or end
    windows = [
        (f"{label} ({a - t0:.0f} to {b - t0:.0f} s)", a, b)
        for label, a, b in (
            ("before the sync", t0, watch.sent_at),
            ("during the sync", watch.sent_at, stop),
            ("after the sync", stop, end),
        )
        if b > a
    ]
    return [
        "## The nightly sync during the load",
        "",
        f"- Job `{watch.job_id}` sent at {sync['sent_at_s']:.0f} s, state "
        f"**{job.get('state', '?')}**, took {took}",
        f"- Changes made to the photo folder first: {watch.changes}",
        f"- Job counts: done {job.get('done', 0)}, skipped {job.get('skipped', 0)}, failed "
        f"{job.get('failed', 0)}, deleted {job.get('deleted', 0)}, unchanged "
        f"{job.get('unchanged', 0)}",
        "",
        LATENCY_HEAD,
        *(_latency_row(label, latency(load.between(a, b)), b - a) for label, a, b in windows),
        "",
    ]


def write_report(
    out: Path,
    plan: Plan,
    t0: float,
    samples: list[Sample],
    watch: SyncWatch | None,
    target: Target,
    at: Occasion,
) -> Path:
    records = read(Path(plan.records))
    summary = summarize(plan, records, t0, samples, watch)
    duration = plan.scenario.duration_s
    span = None
    if watch is not None:
        span = (watch.sent_at - t0, (watch.finished_at or t0 + duration) - t0)
    plot_triton(out / "triton.png", samples, t0, span)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    report = out / "report.md"
    report.write_text(render(summary, plan, target, records, t0, watch, at))
    return report


# -- the plot of Triton's batching over time, the sync shaded ------------------------------------


@contextmanager
def _figure(
    path: Path, rows: int, title: str, ylabel: str, span: Span, ncol: int = 1
) -> Iterator[list[Axes]]:
    """A figure of `rows` plots over the load's seconds, the sync shaded, saved on the way out."""
    fig, grid = plt.subplots(
        rows, 1, figsize=(9, 4 if rows == 1 else 5), sharex=True, squeeze=False
    )
    axes = [ax for (ax,) in grid]
    yield axes
    for ax in axes:
        if span is not None:
            ax.axvspan(span[0], span[1], color="#f2c14e", alpha=0.3, label="nightly sync")
        ax.legend(loc="upper left", ncol=ncol)
    axes[0].set_title(title)
    axes[0].set_ylabel(ylabel)
    axes[-1].set_xlabel("seconds into the load")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_triton(path: Path, samples: list[Sample], t0: float, span: Span) -> None:
    """Mean batch size and queue time per request between two readings of Triton's counters."""
    title = "Triton: dynamic batching over time"
    with _figure(path, 2, title, "mean batch size", span) as (top, bottom):
        bottom.set_ylabel("mean queue time, ms")
        for kind in MODELS:
            keys = [f"{kind}_{k}" for k in ("requests", "executions", "queue_us")]
            points = [p for p in samples if all(k in p.values for k in keys)]
            t, batch, queue = [], [], []
            for a, b in itertools.pairwise(points):
                requests, executions, queue_us = (b.values[k] - a.values[k] for k in keys)
                if requests > 0 and executions > 0:
                    t.append((a.at + b.at) / 2 - t0)
                    batch.append(requests / executions)
                    queue.append(queue_us / requests / 1000)
            top.plot(t, batch, marker=".", label=kind)
            bottom.plot(t, queue, marker=".", label=kind)
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            ax.set_ylim(bottom=0)
