"""Run a load-test scenario against PhotoSearch and write its report.

    python -m loadtests.run                       # scenario `mixed` against `photosearch up`
    python -m loadtests.run --start               # start `photosearch up` for the run first
    python -m loadtests.run --scenario peak --rate 50 --duration 60
    python -m loadtests.run --url https://search.internal --api-key ... --triton-metrics ...

Scenarios live in loadtests/scenarios.toml (--config for another file). Locust sends the load
from a process of its own; this process samples the API's and Triton's /metrics, starts the
nightly sync mid-way, and writes report.md, summary.json and a plot of Triton's batching into
--out, beside Locust's own HTML and CSV reports (requests/s and latency over time).
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlencode

import httpx
from redis import Redis

from core.demo import write_demo_photos
from core.settings import Settings
from harness import photos as photoset
from harness.machine import ROOT, Occasion
from loadtests.records import Sample, Sampler
from loadtests.report import LOCUST, write_report
from loadtests.scenario import (
    DEFAULT_FILE,
    Plan,
    Scenario,
    ScenarioError,
    load_scenario,
    user_groups,
)
from loadtests.system import (
    SyncWatch,
    Target,
    TargetError,
    attach,
    churn_photos,
    poll_sync,
    say,
    send_sync,
    start,
)
from photosearch.up.probes import choose_port

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
UPLOADS = 16  # distinct photos the internal apps upload, cut from the demo photos
SEED_QUERIES = ("photo", "a cat", "a person", "landscape", "animal", "city", "food", "flower")


def photo_ids(url: str, key: str | None, limit: int = 100) -> list[str]:
    """Photos the index holds, found the way a caller finds them: by searching."""
    headers = {"X-API-Key": key} if key else {}
    ids: set[str] = set()
    for q in SEED_QUERIES:
        r = httpx.get(f"{url}/v1/search?{urlencode({'q': q, 'limit': limit})}", headers=headers)
        r.raise_for_status()
        ids.update(hit["id"] for hit in r.json()["results"])
    if not ids:
        raise TargetError(f"{url} finds no photo: index some before a load test")
    return sorted(ids)


def similar_pool(target: Target) -> list[str]:
    """The photos internal apps ask "more like this" for. Where this run's sync deletes some
    generated photos, those are left out: a 404 for a photo just deleted is a right answer, not
    an error, and would only blur the error count."""
    ids = photo_ids(target.url, target.api_key)
    if target.photos is not None:
        ids = [i for i in ids if not i.startswith(f"{photoset.VARIANTS}/")] or ids
    return ids


def uploads(folder: Path, count: int) -> list[str]:
    """Photos a customer would upload: variants of the demo photos, not indexed copies."""
    originals = folder / "originals"
    write_demo_photos(originals)
    sources = sorted(p for p in originals.iterdir() if p.suffix in (".jpg", ".png"))
    paths = []
    for i in range(count):
        path = folder / f"upload-{i:02d}.jpg"
        path.write_bytes(photoset.variant(sources[i % len(sources)], 10_000 + i))
        paths.append(str(path))
    return paths


def forget_cached_queries(settings: Settings) -> int:
    """Delete the cached query embeddings, so a run starts from a cold cache."""
    redis = Redis.from_url(settings.redis.cache)
    try:
        keys = list(redis.scan_iter(f"{settings.redis.prefix}:qcache:*", count=1000))
        return int(redis.delete(*keys)) if keys else 0
    finally:
        redis.close()


def run_load(
    target: Target, scenario: Scenario, out: Path, sync_grace_s: float, at: Occasion
) -> Path:
    """The scenario's load with its one sync mid-way, then the report."""
    settings = target.settings
    sync_at = scenario.sync.at * scenario.duration_s if scenario.sync else None
    if sync_at is not None and settings is None and target.admin_key is None:
        say("no sync: it needs the system's Redis (`photosearch up`) or --admin-key")
        sync_at = None
    watch: SyncWatch | None = None
    changes: dict[str, int] | None = None

    def tick(now: float, plan: Plan) -> None:
        nonlocal watch, changes
        # The day's photos change at the start, the nightly sync goes at its planned moment:
        # writing the churned photos (seconds on a loaded machine) does not delay it.
        if sync_at is not None and changes is None:
            changes = churn_photos(target, scenario, plan.salt)
        if sync_at is not None and changes is not None and watch is None and now >= sync_at:
            watch = send_sync(target, changes)
        if watch is not None and watch.finished_at is None:
            poll_sync(target, watch)

    load = drive(target, scenario, out, tick)
    deadline = time.time() + sync_grace_s
    while watch is not None and not poll_sync(target, watch) and time.time() < deadline:
        time.sleep(1)
    return write_report(out, load.plan, load.t0, load.samples, watch, target, at)


@dataclass(frozen=True)
class Load:
    """A load that was sent: its plan, when it started (epoch s) and the metrics read."""

    plan: Plan
    t0: float
    samples: list[Sample]


def drive(
    target: Target,
    scenario: Scenario,
    out: Path,
    tick: Callable[[float, Plan], None],
    sample_every_s: float = 2.0,
) -> Load:
    """Send the scenario's traffic with Locust; `tick(seconds since the load began, plan)`
    runs every half second meanwhile (the sync a run or a soak starts, what it samples)."""
    if scenario.cold_cache and target.settings is not None:
        forgot = forget_cached_queries(target.settings)
        say(f"cold cache: {forgot} cached query embeddings forgotten")
    # The uploads (several MB of JPEGs) live only as long as the run, not in the report.
    uploads_dir = tempfile.TemporaryDirectory(prefix="loadtest-uploads-")
    plan = Plan(
        scenario=scenario,
        salt=random.getrandbits(32),
        records=str(out / "requests.csv"),
        started=str(out / "started"),
        images=uploads(Path(uploads_dir.name), UPLOADS),
        photo_ids=similar_pool(target),
        api_key=target.api_key,
        groups=user_groups(scenario),
    )
    (out / "plan.json").write_text(plan.model_dump_json(indent=2))
    users = plan.users
    command = [
        *(sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless"),
        *("--users", str(users), "--spawn-rate", str(users), "--host", target.url),
        *("--run-time", f"{scenario.duration_s:.0f}s", "--stop-timeout", "10"),
        *("--only-summary", "--loglevel", "WARNING", "--exit-code-on-error", "0"),
        *("--csv", str(out / LOCUST), "--csv-full-history", "--html", str(out / f"{LOCUST}.html")),
    ]
    say(
        f"{scenario.name}: {scenario.rate:g}/s for {scenario.duration_s:g} s, {users} users "
        f"({plan.groups['text'].users} site visitors, {plan.groups['internal'].users} internal)"
    )
    env = dict(os.environ, PHOTOSEARCH_LOADTEST_PLAN=str(out / "plan.json"))
    with (
        uploads_dir,
        Sampler(target.metrics_url, target.triton_metrics, sample_every_s) as sampler,
        (out / "locust.log").open("wb") as log,
    ):
        locust = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        started = Path(plan.started)
        while not started.exists() and locust.poll() is None:
            time.sleep(0.05)
        t0 = float(started.read_text()) if started.exists() else time.time()
        while locust.poll() is None:
            tick(time.time() - t0, plan)
            time.sleep(0.5)
    # The report folder gets shared: the plan stays, the key does not.
    shown = plan.model_copy(update={"api_key": "<redacted>" if plan.api_key else None})
    (out / "plan.json").write_text(shown.model_dump_json(indent=2))
    if locust.returncode != 0:
        tail = (out / "locust.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"locust exited {locust.returncode}:\n{tail}")
    return Load(plan, t0, sampler.samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", default="mixed", help="a [name] of the scenario file")
    parser.add_argument("--config", type=Path, default=DEFAULT_FILE, help="scenario file")
    parser.add_argument("--rate", type=float, help="requests per second [scenario's]")
    parser.add_argument("--duration", type=float, help="seconds of load [scenario's]")
    parser.add_argument("--out", type=Path, help="report folder [var/loadtests/NAME-TIME]")
    add_system_arguments(parser, remote=True)
    parser.add_argument("--sync-grace", type=float, default=300, help="wait for the sync, s")
    args = parser.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario, args.config, args.rate, args.duration)
    except ScenarioError as exc:
        parser.error(str(exc))
    # Taken first: the commit that runs, and the machine's load before this run adds its own.
    at = Occasion.now(shlex.join(["python", "-m", "loadtests.run", *(argv or sys.argv[1:])]))
    out = report_folder(args.out, scenario.name)
    try:
        target = open_target(args, out)
    except TargetError as exc:
        say(str(exc))
        return 2
    try:
        report = run_load(target, scenario, out, args.sync_grace, at)
    finally:
        target.stop()
    say(f"report: {report}")
    print(report)
    return 0


def add_system_arguments(parser: argparse.ArgumentParser, *, remote: bool) -> None:
    """The options that pick the system under load; `remote`: any deployment by its URL."""
    system = parser.add_argument_group("the system under load (default: `photosearch up`'s)")
    system.add_argument("--data-dir", type=Path, help="of `photosearch up` [its default]")
    system.add_argument("--start", action="store_true", help="start `photosearch up` first")
    system.add_argument("--variants", type=int, default=200, help="--start: extra photos")
    system.add_argument("--port", type=int, default=8000, help="--start: the API's port")
    system.add_argument("--api-key", help="the internal apps' key [anonymous; --start: made]")
    if remote:
        system.add_argument("--url", help="another deployment's API (no up.json)")
        system.add_argument("--triton-metrics", help="with --url: Triton's /metrics URL")
        system.add_argument("--api-metrics", help="with --url: the API's /metrics URL")
        system.add_argument("--admin-key", help="with --url: a key with the admin scope, to sync")


def report_folder(given: Path | None, name: str) -> Path:
    """--out, or var/loadtests/NAME-TIME; created."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = (given or ROOT / "var" / "loadtests" / f"{name}-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


def up_data_dir(args: argparse.Namespace) -> Path:
    """The data directory of the `photosearch up` under load (--start: var/loadtest-up)."""
    if args.data_dir is None and args.start:
        return (ROOT / "var" / "loadtest-up").resolve()  # not the user's own data
    return (args.data_dir or Settings().data_dir).resolve()


def open_target(args: argparse.Namespace, out: Path) -> Target:
    """The system the options name: started, attached to, or reached by its URL."""
    if getattr(args, "url", None):
        return Target(
            args.url.rstrip("/"),
            args.triton_metrics,
            None,
            args.api_key,
            args.admin_key,
            api_metrics=args.api_metrics,
        )
    data_dir = up_data_dir(args)
    if not args.start:
        return attach(data_dir, args.api_key)
    photos = data_dir / "loadtest-photos"
    say(f"photos: {len(photoset.prepare(photos, args.variants))} in {photos}")
    port = choose_port(args.port, "API", say)
    redis_port = choose_port(6390, "Redis", say)
    return start(data_dir, photos, port, redis_port, out / "up.log")


if __name__ == "__main__":
    raise SystemExit(main())
