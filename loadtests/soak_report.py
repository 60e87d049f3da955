"""The soak test's figures and verdicts: latency and errors per minute, p99 drift between the
first and the last third, and the resident memory of every process after a warm-up."""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtests.observe import SyncWatch
from loadtests.records import Latency, Records, latency

# The criteria, with "stable" made a number: the last third's p99 may be at most
# this many times the first third's (a leak or a growing queue shows as a steady climb).
P99_DRIFT_MAX = 1.5
RSS_GROWTH_MAX = 0.10
RSS_FIELDS = ("at_s", "process", "pid", "rss_mib")


@dataclass(frozen=True)
class RssSample:
    """One process's resident memory at `at_s` seconds after the load began."""

    at_s: float
    process: str  # a label that survives a restart: its role in `photosearch up`
    pid: int
    rss_mib: float


@dataclass(frozen=True)
class Growth:
    """A process's memory: the median of its samples just after the warm-up and at the end."""

    process: str
    start_mib: float
    end_mib: float
    pids: int  # more than one: it was restarted during the run

    @property
    def share(self) -> float:
        return (self.end_mib - self.start_mib) / self.start_mib if self.start_mib else math.nan


@dataclass(frozen=True)
class Verdict:
    criterion: str
    passed: bool
    detail: str


def write_rss(path: Path, samples: list[RssSample]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(RSS_FIELDS)
        for s in samples:
            writer.writerow([f"{s.at_s:.3f}", s.process, s.pid, f"{s.rss_mib:.3f}"])


def read_rss(path: Path) -> list[RssSample]:
    with path.open(newline="") as f:
        return [
            RssSample(float(r["at_s"]), r["process"], int(r["pid"]), float(r["rss_mib"]))
            for r in csv.DictReader(f)
        ]


def per_minute(records: Records, t0: float, duration_s: float) -> list[Latency]:
    """Latency and errors of the requests sent in each minute of the load."""
    return [
        latency(records.between(t0 + start, t0 + min(start + 60.0, duration_s)))
        for start in range(0, math.ceil(duration_s), 60)
    ]


def thirds(records: Records, t0: float, duration_s: float) -> tuple[Latency, Latency]:
    """The first and the last third of the load."""
    third = duration_s / 3
    return (
        latency(records.between(t0, t0 + third)),
        latency(records.between(t0 + duration_s - third, t0 + duration_s)),
    )


def rss_growth(
    samples: list[RssSample], warmup_s: float, window_s: float, end_s: float
) -> list[Growth]:
    """Each process's memory over [warmup, warmup + window] against the last window.

    Medians over windows as long as the sync interval: each window then holds one sync's
    indexing and its quiet time, so a batch in flight at one instant is not taken for growth.
    """
    out = []
    for process in sorted({s.process for s in samples}):
        mine = [s for s in samples if s.process == process]
        start = [s.rss_mib for s in mine if warmup_s <= s.at_s < warmup_s + window_s]
        end = [s.rss_mib for s in mine if s.at_s >= end_s - window_s]
        if start and end:
            out.append(
                Growth(
                    process,
                    statistics.median(start),
                    statistics.median(end),
                    len({s.pid for s in mine}),
                )
            )
    return out


def verdicts(
    load: Latency, first: Latency, last: Latency, growth: list[Growth], syncs: list[SyncWatch]
) -> list[Verdict]:
    failed_syncs = [w.job_id for w in syncs if w.job.get("state") != "done"]
    worst = max(growth, key=lambda g: g.share, default=None)
    restarted = [g.process for g in growth if g.pids > 1]
    drift = last.p99 / first.p99 if first.p99 else math.nan
    return [
        Verdict(
            "no errors",
            load.errors == 0 and not failed_syncs,
            f"{load.errors} failed requests of {load.count}; syncs not done: "
            f"{', '.join(failed_syncs) or 'none'} of {len(syncs)}",
        ),
        Verdict(
            f"p99 stable (last third within {P99_DRIFT_MAX:g}x the first)",
            drift <= P99_DRIFT_MAX,
            f"first third {first.p99:.1f} ms, last third {last.p99:.1f} ms: {drift:.2f}x",
        ),
        Verdict(
            f"resident memory of every process grows < {RSS_GROWTH_MAX:.0%}",
            bool(growth) and all(g.share < RSS_GROWTH_MAX for g in growth) and not restarted,
            "no process sampled in both windows"
            if worst is None
            else f"largest: {worst.process} {worst.share:+.1%} "
            f"({worst.start_mib:.0f} -> {worst.end_mib:.0f} MiB); restarted: "
            f"{', '.join(restarted) or 'none'}",
        ),
    ]


def _ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1f}"


def render(
    title: str,
    minutes: list[Latency],
    first: Latency,
    last: Latency,
    growth: list[Growth],
    syncs: list[SyncWatch],
    results: list[Verdict],
    t0: float,
    notes: list[str],
) -> str:
    lines = [f"# {title}", "", *notes, "", "## Verdicts", ""]
    lines += [f"- **{'PASS' if v.passed else 'FAIL'}** {v.criterion}: {v.detail}" for v in results]
    lines += [
        "",
        "## Per minute",
        "",
        "| minute | sent | errors | p50 ms | p99 ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {i} | {m.count} | {m.errors} | {_ms(m.p50)} | {_ms(m.p99)} |"
        for i, m in enumerate(minutes)
    ]
    lines += [
        "",
        "## p99: first third against last third",
        "",
        f"- first third: {first.count} requests, {first.errors} errors, p99 {_ms(first.p99)} ms",
        f"- last third: {last.count} requests, {last.errors} errors, p99 {_ms(last.p99)} ms",
        "",
        "## Resident memory per process (MiB, medians of the two windows)",
        "",
        "| process | after warm-up | end | growth | pids |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {g.process} | {g.start_mib:.1f} | {g.end_mib:.1f} | {g.share:+.1%} | {g.pids} |"
        for g in growth
    ]
    lines += ["", "## Syncs", "", "| job | sent at s | took s | state | done | deleted |"]
    lines.append("|---|---:|---:|---|---:|---:|")
    for w in syncs:
        took = "" if w.finished_at is None else f"{w.finished_at - w.sent_at:.0f}"
        lines.append(
            f"| {w.job_id} | {w.sent_at - t0:.0f} | {took} | {w.job.get('state', '?')} | "
            f"{w.job.get('done', 0)} | {w.job.get('deleted', 0)} |"
        )
    lines += ["", "Raw data: `requests.csv` (every request), `rss.csv` (every sample).", ""]
    return "\n".join(lines)


def summary(
    minutes: list[Latency],
    first: Latency,
    last: Latency,
    growth: list[Growth],
    results: list[Verdict],
) -> dict[str, Any]:
    return {
        "minutes": [asdict(m) for m in minutes],
        "first_third": asdict(first),
        "last_third": asdict(last),
        "rss": [asdict(g) | {"growth": g.share} for g in growth],
        "verdicts": [asdict(v) for v in results],
    }


def write(out: Path, report: str, data: dict[str, Any]) -> Path:
    (out / "soak.json").write_text(json.dumps(data, indent=2, default=str))
    path = out / "report.md"
    path.write_text(report)
    return path
