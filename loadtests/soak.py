"""Soak test: hours-long habits in 30 minutes. Mixed searches at 50/s with syncs of churned
photos every few minutes, the resident memory of every process of `photosearch up` sampled
throughout, and a report that says whether it held.

    python -m loadtests.soak --start                  # 30 min at 50/s, its own `photosearch up`
    python -m loadtests.soak --start --duration 300   # a shorter look
    make soak ARGS="--duration 600"

Verdicts (loadtests/soak_report.py): no failed request and every sync done; p99 of the last
third within 1.5x of the first third's; every process's RSS (median over one sync interval
after the warm-up against the last one) grows less than 10%, none restarted.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.bench_up import rss_mib
from loadtests.machine import Occasion
from loadtests.nightly import poll_sync, start_sync
from loadtests.observe import SyncWatch, cache_figures, triton_figures
from loadtests.plan import Plan
from loadtests.records import latency, read
from loadtests.report import in_load
from loadtests.run import add_system_arguments, drive, open_target, report_folder, up_data_dir
from loadtests.scenario import DEFAULT_FILE, Scenario, ScenarioError, load_scenario
from loadtests.soak_report import (
    RssSample,
    per_minute,
    render,
    rss_growth,
    summary,
    thirds,
    verdicts,
    write,
    write_rss,
)
from loadtests.target import Target, TargetError, say
from photosearch.up.supervisor import read_state
from tests.support.upprocess import descendants

MODELS = ("clip_image", "clip_text")


def _proc(pid: int, name: str) -> str:
    try:
        return (Path("/proc") / str(pid) / name).read_text().replace("\0", " ").strip()
    except OSError:
        return ""


def processes(supervisor: int, children: dict[str, int]) -> dict[int, str]:
    """Every process of a `photosearch up`, each by a label that a restart keeps: `up`, its
    children by their role (api, triton, redis, beat...), theirs by role/command (Triton's
    python-backend stubs by the model they serve)."""
    role = {pid: name for name, pid in children.items()}
    labels = {supervisor: "up"}
    below = descendants(supervisor)
    for pid in sorted(below):
        if pid in role:
            labels[pid] = role[pid]
            continue
        parent = pid
        while parent not in role and parent != supervisor:
            stat = _proc(parent, "stat")
            if not stat:
                break
            parent = int(stat.rsplit(")", 1)[1].split()[1])
        owner = role.get(parent, "up")
        command = _proc(pid, "comm") or "?"
        model = next((m for m in MODELS if m in _proc(pid, "cmdline")), "")
        labels[pid] = f"{owner}/{command}" + (f" ({model})" if model else "")
    seen: dict[str, int] = {}
    for pid in sorted(labels):  # two of one kind (worker pool processes): number them
        n = seen[labels[pid]] = seen.get(labels[pid], 0) + 1
        if n > 1:
            labels[pid] = f"{labels[pid]} #{n}"
    return labels


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
            self.sample(now)
            self.next_rss_s += self.rss_every_s
        current = self.syncs[-1] if self.syncs else None
        if current is not None and current.finished_at is None:
            poll_sync(self.target, current)
        elif self.scenario.sync is not None and now >= self.next_sync_s:
            # A new night's churn each time, so every sync has indexing to do.
            self.syncs.append(start_sync(self.target, self.scenario, plan.salt + len(self.syncs)))
            self.next_sync_s = now + self.sync_every_s

    def sample(self, now: float) -> None:
        children = read_state(self.data_dir).get("children", {})
        for pid, label in processes(self.supervisor, children).items():
            self.rss.append(RssSample(now, label, pid, rss_mib({pid})))


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
    supervisor = target.process.pid if target.process else int(read_state(data_dir)["pid"])
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
    growth = rss_growth(soak.rss, warmup_s, window_s, duration)
    results = verdicts(latency(records), first, last, growth, soak.syncs)
    shares = ", ".join(f"{k} {v:.0%}" for k, v in scenario.shares().items())
    notes = [
        f"- **When**: {at.started:%Y-%m-%d %H:%M} UTC; **commit** {at.commit}; "
        f"**machine** {at.machine}, load average {at.load:.2f} before the run",
        f"- **Load**: {scenario.rate:g}/s for {duration:g} s ({shares}); a sync of churned "
        f"photos ({scenario.sync}) every {sync_every_s:g} s, or when the previous one ended",
        f"- **Memory**: RSS of every process below the `photosearch up` (pid {supervisor}) "
        f"every {rss_every_s:g} s; warm-up {warmup_s:g} s, windows of {window_s:g} s",
        f"- **Command**: `{at.command}`",
    ]
    # Where the time went when searches fail: Triton's batches, queue and compute per model.
    if len(load.samples) >= 2:
        first_s, last_s = load.samples[0], load.samples[-1]
        cache = cache_figures(first_s, last_s)
        if cache is not None:
            notes.append(f"- **Query cache**: hit ratio {cache['hit_ratio']:.2f}")
        for kind in ("text", "image"):
            f = triton_figures(first_s, last_s, kind)
            if f is not None:
                notes.append(
                    f"- **Triton {kind}**: {f['requests']:.0f} requests, mean batch "
                    f"{f['batch']:.1f}, queue {f['queue_ms']:.0f} ms and compute "
                    f"{f['compute_ms']:.0f} ms per request"
                )
    title = f"Soak: {scenario.rate:g} requests/s for {duration:g} s"
    report = render(title, minutes, first, last, growth, soak.syncs, results, load.t0, notes)
    data = summary(minutes, first, last, growth, results)
    data["syncs"] = [
        {"job_id": w.job_id, "sent_at_s": w.sent_at - load.t0, "state": w.job.get("state")}
        for w in soak.syncs
    ]
    data["t0"] = load.t0
    return write(out, report, data)


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
    add_system_arguments(parser, remote=False)  # the memory is read from /proc: local only
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
