"""Soak test: hours-long habits in 30 minutes. Mixed searches at 50/s with syncs of churned
photos every few minutes, the resident memory of every process of `photosearch up` sampled
throughout, and a report that says whether it held.

    python -m loadtests.soak --start                  # 30 min at 50/s, its own `photosearch up`
    python -m loadtests.soak --start --duration 300   # a shorter look
    make soak ARGS="--duration 600"

Verdicts: no failed request and every sync done; p99 of the last third within 1.5x of the
first third's; every process's RSS (median over one sync interval after the warm-up against
the last one) grows less than 10%, except a process with a memory bound of its own (the query
cache's Redis), whose RSS stays within that bound and an allowance; none restarted.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.machine import Occasion
from harness.processes import rss_mib
from loadtests.records import Latency, Records, cache_figures, latency, read, triton_figures
from loadtests.report import in_load, ms
from loadtests.run import add_system_arguments, drive, open_target, report_folder, up_data_dir
from loadtests.scenario import DEFAULT_FILE, Plan, Scenario, ScenarioError, load_scenario
from loadtests.soakmemory import (
    RSS_GROWTH_MAX,
    Growth,
    RssSample,
    bounds,
    processes,
    rss_growth,
    write_rss,
)
from loadtests.system import SyncWatch, Target, TargetError, poll_sync, say, start_sync
from photosearch.up.supervisor import read_state

# The criteria, with "stable" made a number: the last third's p99 may be at most
# this many times the first third's (a leak or a growing queue shows as a steady climb).
P99_DRIFT_MAX = 1.5
MEMORY = (
    f"resident memory: every process flat (grows < {RSS_GROWTH_MAX:.0%}), "
    "a bounded one within its bound"
)


@dataclass(frozen=True)
class Verdict:
    criterion: str
    passed: bool
    detail: str


@dataclass
class Soak:
    """What the soak's tick does: the syncs, one after the other, and the memory samples."""

    target: Target
    scenario: Scenario
    data_dir: Path
    supervisor: int
    sync_every_s: float
    rss_every_s: float
    syncs: list[SyncWatch] = field(default_factory=list)
    rss: list[RssSample] = field(default_factory=list)
    next_sync_s: float = 0.0
    next_rss_s: float = 0.0

    def tick(self, now: float, plan: Plan) -> None:
        if now >= self.next_rss_s:
            children = read_state(self.data_dir).get("children", {})
            for pid, label in processes(self.supervisor, children).items():
                self.rss.append(RssSample(now, label, pid, rss_mib({pid})))
            self.next_rss_s += self.rss_every_s
        current = self.syncs[-1] if self.syncs else None
        if current is not None and current.finished_at is None:
            poll_sync(self.target, current)
        elif self.scenario.sync is not None and now >= self.next_sync_s:
            # A new night's churn each time, so every sync has indexing to do.
            self.syncs.append(start_sync(self.target, self.scenario, plan.salt + len(self.syncs)))
            self.next_sync_s = now + self.sync_every_s


# -- the figures and the verdicts ---------------------------------------------------------------


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


def verdicts(
    load: Latency, first: Latency, last: Latency, growth: list[Growth], syncs: list[SyncWatch]
) -> list[Verdict]:
    failed_syncs = [w.job_id for w in syncs if w.job.get("state") != "done"]
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
            MEMORY,
            bool(growth) and all(g.held for g in growth) and not restarted,
            memory_detail(growth, restarted),
        ),
    ]


def memory_detail(growth: list[Growth], restarted: list[str]) -> str:
    """Those that did not hold, else the largest flat growth; the bounded ones; restarts."""
    if not growth:
        return "no process sampled in both windows"
    flat = [g for g in growth if g.bound_mib is None]
    bounded = [g for g in growth if g.bound_mib is not None]
    failed = [g for g in growth if not g.held]
    parts = [f"not held: {', '.join(g.said() for g in failed)}"] if failed else []
    if flat and not failed:
        parts.append(f"largest: {max(flat, key=lambda g: g.share).said()}")
    if bounded and not failed:
        parts.append(f"bounded: {', '.join(g.said() for g in bounded)}")
    parts.append(f"restarted: {', '.join(restarted) or 'none'}")
    return "; ".join(parts)


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
    lines += ["", "## Per minute", "", "| minute | sent | errors | p50 ms | p99 ms |"]
    lines.append("|---:|---:|---:|---:|---:|")
    lines += [
        f"| {i} | {m.count} | {m.errors} | {ms(m.p50)} | {ms(m.p99)} |"
        for i, m in enumerate(minutes)
    ]
    lines += ["", "## p99: first third against last third", ""]
    for name, third in (("first", first), ("last", last)):
        lines.append(
            f"- {name} third: {third.count} requests, {third.errors} errors, p99 {ms(third.p99)} ms"
        )
    lines += ["", "## Resident memory per process (MiB, medians of the two windows)", ""]
    lines += [
        "| process | after warm-up | end | growth | peak | judged by | held | pids |",
        "|---|---:|---:|---:|---:|---|---|---:|",
    ]
    lines += [
        f"| {g.process} | {g.start_mib:.1f} | {g.end_mib:.1f} | {g.share:+.1%} | "
        f"{'' if math.isnan(g.peak_mib) else f'{g.peak_mib:.1f}'} | {g.criterion} | "
        f"{'yes' if g.held else '**no**'} | {g.pids} |"
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


def run_soak(
    target: Target,
    scenario: Scenario,
    out: Path,
    data_dir: Path,
    *,
    sync_every_s: float,
    warmup_s: float,
    window_s: float,
    rss_every_s: float,
    sync_grace_s: float,
    at: Occasion,
) -> Path:
    supervisor = target.up.process.pid if target.up and target.up.process else None
    supervisor = supervisor or int(read_state(data_dir)["pid"])
    # The query cache's Redis is held to its maxmemory, read from the server before the load.
    cache_url = target.settings.redis.cache if target.settings is not None else None
    bound = bounds(cache_url, read_state(data_dir).get("children", {}))
    soak = Soak(target, scenario, data_dir, supervisor, sync_every_s, rss_every_s)
    if scenario.sync is not None:
        soak.next_sync_s = scenario.sync.at * scenario.duration_s
    load = drive(target, scenario, out, soak.tick)
    deadline = time.time() + sync_grace_s
    while soak.syncs and not poll_sync(target, soak.syncs[-1]) and time.time() < deadline:
        time.sleep(1)
    write_rss(out / "rss.csv", soak.rss)
    duration = scenario.duration_s
    records = in_load(read(Path(load.plan.records)), load.t0, duration)
    minutes = per_minute(records, load.t0, duration)
    first, last = thirds(records, load.t0, duration)
    growth = rss_growth(soak.rss, warmup_s, window_s, duration, bound)
    results = verdicts(latency(records), first, last, growth, soak.syncs)
    shares = ", ".join(f"{k} {v:.0%}" for k, v in scenario.shares().items())
    notes = [
        f"- **When**: {at.started:%Y-%m-%d %H:%M} UTC; **commit** {at.commit}; "
        f"**machine** {at.machine}, load average {at.load:.2f} before the run",
        f"- **Load**: {scenario.rate:g}/s for {duration:g} s ({shares}); a sync of churned "
        f"photos ({scenario.sync}) every {sync_every_s:g} s, or when the previous one ended",
        f"- **Memory**: RSS of every process below the `photosearch up` (pid {supervisor}) "
        f"every {rss_every_s:g} s; warm-up {warmup_s:g} s, windows of {window_s:g} s; "
        + (
            ", ".join(
                f"{name} bounded by its maxmemory {mib:.0f} MiB" for name, mib in bound.items()
            )
            or "no process with a memory bound of its own"
        ),
        f"- **Command**: `{at.command}`",
    ]
    # Where the time went when searches fail: Triton's batches, queue and compute per model.
    if (cache := cache_figures(load.samples)) is not None:
        notes.append(f"- **Query cache**: hit ratio {cache['hit_ratio']:.2f}")
    for kind in ("text", "image"):
        if (f := triton_figures(load.samples, kind)) is not None:
            notes.append(
                f"- **Triton {kind}**: {f['requests']:.0f} requests, mean batch "
                f"{f['batch']:.1f}, queue {f['queue_ms']:.0f} ms and compute "
                f"{f['compute_ms']:.0f} ms per request"
            )
    title = f"Soak: {scenario.rate:g} requests/s for {duration:g} s"
    report = render(title, minutes, first, last, growth, soak.syncs, results, load.t0, notes)
    data: dict[str, Any] = {
        "minutes": [asdict(m) for m in minutes],
        "first_third": asdict(first),
        "last_third": asdict(last),
        "rss": [
            asdict(g) | {"growth": g.share, "limit_mib": g.limit_mib, "held": g.held}
            for g in growth
        ],
        "verdicts": [asdict(v) for v in results],
        "syncs": [
            {"job_id": w.job_id, "sent_at_s": w.sent_at - load.t0, "state": w.job.get("state")}
            for w in soak.syncs
        ],
        "t0": load.t0,
    }
    (out / "soak.json").write_text(json.dumps(data, indent=2, default=str))
    (out / "report.md").write_text(report)
    return out / "report.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", default="soak", help="a [name] of the scenario file")
    parser.add_argument("--config", type=Path, default=DEFAULT_FILE, help="scenario file")
    parser.add_argument("--rate", type=float, help="requests per second [scenario's: 50]")
    parser.add_argument("--duration", type=float, help="seconds of load [scenario's: 1800]")
    parser.add_argument("--sync-every", type=float, default=300, help="s between syncs' starts")
    parser.add_argument("--warmup", type=float, help="s before memory counts [duration/6]")
    parser.add_argument("--window", type=float, help="s of each memory window [--sync-every]")
    parser.add_argument("--rss-every", type=float, default=10, help="s between memory samples")
    parser.add_argument("--out", type=Path, help="report folder [var/loadtests/soak-TIME]")
    parser.add_argument("--sync-grace", type=float, default=300, help="wait for the last sync")
    # The memory is read from the processes themselves (psutil): a local system only.
    add_system_arguments(parser, remote=False)
    args = parser.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario, args.config, args.rate, args.duration)
    except ScenarioError as exc:
        parser.error(str(exc))
    warmup = scenario.duration_s / 6 if args.warmup is None else args.warmup
    window = min(args.window or args.sync_every, (scenario.duration_s - warmup) / 2)
    if window <= 0:
        parser.error("--warmup leaves no time for two memory windows")
    at = Occasion.now(shlex.join(["python", "-m", "loadtests.soak", *(argv or sys.argv[1:])]))
    out = report_folder(args.out, scenario.name)
    try:
        target = open_target(args, out)
    except TargetError as exc:
        say(str(exc))
        return 2
    try:
        report = run_soak(
            target,
            scenario,
            out,
            up_data_dir(args),
            sync_every_s=args.sync_every,
            warmup_s=warmup,
            window_s=window,
            rss_every_s=args.rss_every,
            sync_grace_s=args.sync_grace,
            at=at,
        )
    finally:
        target.stop()
    say(f"report: {report}")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
