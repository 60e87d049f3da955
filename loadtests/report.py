"""The report of one load-test run: report.md with PNG plots, and summary.json for machines."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtests import plots
from loadtests.machine import Occasion
from loadtests.observe import Sample, SyncWatch, cache_figures, triton_figures
from loadtests.plan import Plan
from loadtests.records import Latency, Records, hit_ratio, latency, read, series
from loadtests.target import Target
from loadtests.traffic import expected_hit_ratio

KIND_NAMES = {
    "text": "text search (site visitors)",
    "image": "image search (internal apps)",
    "similar": "more like this (internal apps)",
}


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f}"


def _latency_row(label: str, lat: Latency, seconds: float) -> str:
    rate = (lat.count - lat.errors) / seconds if seconds else float("nan")
    return (
        f"| {label} | {lat.count} | {rate:.1f} | {lat.errors} ({lat.error_share:.1%}) | "
        f"{_ms(lat.p50)} | {_ms(lat.p90)} | {_ms(lat.p99)} | {_ms(lat.max)} |"
    )


LATENCY_HEAD = (
    "| requests | sent | answered/s | errors | p50 ms | p90 ms | p99 ms | max ms |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|"
)


def in_load(records: Records, t0: float, duration_s: float) -> Records:
    """The requests of the load: one sent before the end counts, however late its answer."""
    return records.between(t0, t0 + duration_s + 60)


def sync_windows(records: Records, t0: float, end: float, watch: SyncWatch) -> list[str]:
    """Latency before, during and after the sync: what the nightly job costs searches."""
    stop = watch.finished_at or end
    rows = []
    for label, a, b in (
        ("before the sync", t0, watch.sent_at),
        ("during the sync", watch.sent_at, stop),
        ("after the sync", stop, end),
    ):
        if b > a:
            rows.append(
                _latency_row(
                    f"{label} ({a - t0:.0f} to {b - t0:.0f} s)",
                    latency(records.between(a, b)),
                    b - a,
                )
            )
    return rows


def summarize(
    plan: Plan,
    records: Records,
    t0: float,
    samples: list[Sample],
    watch: SyncWatch | None,
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
        "cache_hit_ratio_answers": hit_ratio(load.of("text")),
        "cache_hit_ratio_ceiling": expected_hit_ratio(scenario.queries, len(load.of("text"))),
    }
    if len(samples) >= 2:
        out["cache"] = cache_figures(samples[0], samples[-1])
        out["triton"] = {k: triton_figures(samples[0], samples[-1], k) for k in ("text", "image")}
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
    lines = [
        f"# Load test `{s.name}`: {s.rate:g} requests/s for {s.duration_s:g} s",
        "",
        f"{s.description}.",
        "",
        f"- **When**: {datetime.fromtimestamp(t0, UTC):%Y-%m-%d %H:%M:%S} UTC; "
        f"**commit** {at.commit}",
        f"- **Machine**: {at.machine}; load average {at.load:.2f} before the run",
        f"- **Target**: {target.url} ({'started by this run' if target.process else 'running'})"
        f"; Triton metrics: {target.triton_metrics or 'not known'}",
        f"- **Users**: {plan.groups['text'].users} site visitors and "
        f"{plan.groups['internal'].users} internal apps "
        f"({'with their own key' if plan.api_key else 'anonymous'}), each thinking an "
        "exponential time between requests (Poisson arrivals at the planned rate)",
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
    ]
    load = in_load(records, t0, s.duration_s)
    for kind, figures in summary["kinds"].items():
        lines.append(_latency_row(KIND_NAMES[kind], Latency(**figures), s.duration_s))
    lines.append(_latency_row("**all**", Latency(**summary["all"]), s.duration_s))
    lines += ["", f"Planned {s.rate:g}/s; answered {summary['achieved_rate']:.1f}/s.", ""]
    lines += ["![latency percentiles over time](latency.png)", ""]
    lines += ["![requests per second over time](throughput.png)", ""]
    lines += _cache_lines(summary)
    lines += _triton_lines(summary)
    if watch is not None:
        lines += _sync_lines(summary, load, t0, t0 + s.duration_s, watch)
    lines += ["## Errors", ""]
    if summary["errors"]:
        lines += ["| count | error |", "|---:|---|"]
        lines += [f"| {n} | `{e[:150]}` |" for e, n in summary["errors"].items()]
    else:
        lines.append("None.")
    lines += ["", "Every request is in `requests.csv`; the figures above in `summary.json`.", ""]
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
        f"- Of the text searches answered (200), the share whose embedding came from the "
        "cache, where the answer said (an operator's key only; failed searches are all "
        "misses, so under errors this reads high): "
        f"{_ratio(summary['cache_hit_ratio_answers'])}",
        f"- The most a cold cache can reach with this query curve and this many searches "
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
    for kind, f in triton.items():
        if f is not None:
            lines.append(
                f"| {kind} | {f['requests']:.0f} | {f['executions']:.0f} | "
                f"{_ratio(f['batch'])} | {_ms(f['queue_ms'])} | {_ms(f['compute_ms'])} |"
            )
    return [*lines, "", "![Triton batch size and queue time](triton.png)", ""]


def _sync_lines(
    summary: dict[str, Any], load: Records, t0: float, end: float, watch: SyncWatch
) -> list[str]:
    job = watch.job
    sync = summary["sync"]
    finished = sync["finished_at_s"]
    took = "not finished" if finished is None else f"{finished - sync['sent_at_s']:.1f} s"
    lines = [
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
        *sync_windows(load, t0, end, watch),
        "",
    ]
    return lines


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
    window = max(2.0, duration / 40)
    sync_span = None
    if watch is not None:
        sync_span = (watch.sent_at - t0, (watch.finished_at or t0 + duration) - t0)
    plots.latency(out / "latency.png", series(records, t0, duration, window), sync_span)
    plots.throughput(out / "throughput.png", series(records, t0, duration, 1.0), sync_span)
    plots.triton(out / "triton.png", samples, t0, sync_span)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    report = out / "report.md"
    report.write_text(render(summary, plan, target, records, t0, watch, at))
    return report
