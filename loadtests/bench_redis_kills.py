"""`python -m loadtests.bench_redis_kills`: a sync of 10,000 photos with the queue's Redis
SIGKILLed 0, 1 and 5 times: its wall time, the photos embedded twice, and the longest a task
waited to be taken up again after a kill.

The queue's Redis runs as `photosearch up`, compose and Kubernetes run it (append-only file
fsynced always) and is started again at once after each kill, as a restart policy does; a real
`photosearch worker` process syncs a folder of small JPEGs through Triton's tiny test model
into Qdrant Edge, started again whenever it exits (kombu's reconnect sometimes gives up, and a
supervisor starts it again). The kills fall at even shares of the photos done. The visibility
timeout is the default (3,600 s): what brings work back in seconds is the lease
(PHOTOSEARCH_INDEXER__LEASE_S); the retries are production's (240, backoff to 15 s). A job
that ends with photos failed is reported with its first reasons, not raised.

- wall time: from the submission to the job's end;
- embedded twice: images Triton's image model embedded (nv_inference_count) past the photos;
- the longest wait: after each kill, the time until the job's count of photos done moved
  again, the longest over the kills (what a task lost with the kill waited, at most).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from core.jobs import Jobs
from core.jobstatus import FINISHED, JobStatus
from core.settings import Settings
from core.settings_indexer import IndexerSettings
from core.submit import queue_sync
from core.taskqueue import create_celery
from harness.models import TINY_CONFIG
from harness.observe import Metrics, fetch_text
from harness.photos import write_catalogue
from harness.processes import bench_settings, process_env, triton_ports, worker_process
from loadtests.registry import Figure
from photosearch.up.probes import redis_process_id
from photosearch.up.processes import Child, redis_binary, redis_command

POLL_S = 0.05  # how often the job's record is read
KILLS = (0, 1, 5)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--photos", type=int, default=10_000)
    p.add_argument("--kills", default=",".join(map(str, KILLS)), help="kills of each run")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--work", type=Path, help="a folder for the catalogue (default: temp)")
    return p


@dataclass
class KillRun:
    kills: int
    wall_s: float = 0.0
    photos: int = 0
    embedded: float = 0.0  # images the image model embedded during the sync
    waits: list[float] = field(default_factory=list)  # after each kill, until progress
    worker_starts: int = 0
    state: str = ""  # the job's, at its end
    failed: int = 0  # photos the job counted failed
    problems: list[str] = field(default_factory=list)  # the first reasons it recorded

    @property
    def twice(self) -> float:
        return self.embedded - self.photos

    @property
    def longest_wait_s(self) -> float:
        return max(self.waits, default=0.0)


def queue_redis(folder: Path) -> tuple[Child, str]:
    """The queue's Redis as `photosearch up` runs it: kept on disk, fsynced before each reply."""
    from harness.processes import free_ports

    (port,) = free_ports(1)
    folder.mkdir(parents=True, exist_ok=True)
    child = Child(
        "redis",
        redis_command(redis_binary(), port, folder),
        folder / "redis.log",
        ready=lambda: bool(redis_process_id(port)),
    )
    return child, f"redis://127.0.0.1:{port}/0"


def read_job(jobs: Jobs, job_id: str) -> JobStatus | None:
    """The job's record, or None while its Redis is down."""
    try:
        return jobs.get(job_id)
    except RedisError:
        return None


def image_inferences(metrics_url: str) -> float:
    return Metrics(fetch_text(metrics_url))("nv_inference_count", model="clip_image")


def one_sync(
    work: Path,
    repo: Path,
    triton: tuple[str, str],
    root: Path,
    kills: int,
    args: argparse.Namespace,
) -> KillRun:
    """A sync of the folder with the queue's Redis killed `kills` times; `triton`: its URL and
    its metrics' URL."""
    triton_url, metrics_url = triton
    run = KillRun(kills, photos=args.photos)
    # A folder of its own for each run (the same count of kills may be asked twice).
    own = Path(tempfile.mkdtemp(prefix=f"kills{kills}-", dir=work))
    redis, redis_url = queue_redis(own / "redis")
    # Production's retries (bench_settings' are short, for benchmarks that fail fast).
    values = bench_settings(
        own / "data",
        triton_url,
        repo,
        redis_url,
        batch_size=args.batch_size,
        max_retries=IndexerSettings().max_retries,
        retry_backoff_max_s=IndexerSettings().retry_backoff_max_s,
    )
    settings = Settings(**values)
    redis.start()
    jobs = Jobs(Redis.from_url(redis_url, socket_timeout=2), settings.redis.prefix)
    app = create_celery(settings)
    log = own / "worker.log"
    worker = worker_process(process_env(values), log)
    try:
        worker.start()
        run.worker_starts = 1
        before = image_inferences(metrics_url)
        started = time.perf_counter()
        job_id = queue_sync(app, jobs, str(root))
        marks = [args.photos * (i + 1) // (kills + 1) for i in range(kills)]
        killed_at: float | None = None
        killed_done = 0
        while True:
            job = read_job(jobs, job_id)
            if worker.exit_code() is not None:  # a supervisor starts it again
                worker = worker_process(process_env(values), log)
                worker.start()
                run.worker_starts += 1
            if job is None:
                time.sleep(POLL_S)
                continue
            if killed_at is not None and job.done > killed_done:
                run.waits.append(time.perf_counter() - killed_at)
                killed_at = None
            if job.state in FINISHED:
                break
            if marks and job.done >= marks[0] and killed_at is None:
                marks.pop(0)
                redis.kill()
                redis.start()  # the restart policy
                killed_at, killed_done = time.perf_counter(), job.done
            time.sleep(POLL_S)
        run.wall_s = time.perf_counter() - started
        run.embedded = image_inferences(metrics_url) - before
        # A sync that ends with photos failed is a figure, not a crash of the benchmark.
        run.state, run.failed = str(job.state), job.failed
        run.problems = [p for p in jobs.problems(job_id) if "auto tags off" not in p][:3]
        if killed_at is not None:  # the job ended before a photo more was done
            run.waits.append(time.perf_counter() - killed_at)
    finally:
        worker.stop()
        app.close()
        redis.stop()
    print(
        f"  killed {kills}x: {run.state}, failed {run.failed} {run.problems}; "
        f"{run.wall_s:.1f} s, embedded twice {run.twice:.0f}, waits "
        + ", ".join(f"{w:.1f}" for w in run.waits)
        + f" s; the worker started {run.worker_starts}x",
        flush=True,
    )
    return run


def measure(args: argparse.Namespace) -> list[KillRun]:
    from model.export import export_model
    from model.triton_server import TritonServer

    runs: list[KillRun] = []
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        repo = work / "models"
        export_model(str(TINY_CONFIG), "none", repo)
        root = work / "photos"
        write_catalogue(root, args.photos)
        with TritonServer(repo, triton_ports(), work / "triton") as triton:
            metrics = f"http://127.0.0.1:{triton.ports.metrics}/metrics"
            for kills in (int(k) for k in args.kills.split(",")):
                runs.append(one_sync(work, repo, (triton.url, metrics), root, kills, args))
    return runs


def by_kills(runs: list[KillRun], kills: int) -> KillRun | None:
    return next((r for r in runs if r.kills == kills), None)


def wall(kills: int) -> Figure[list[KillRun]]:
    def value(runs: list[KillRun]) -> float:
        run = by_kills(runs, kills)
        return run.wall_s if run else math.nan

    def context(runs: list[KillRun]) -> str:
        run = by_kills(runs, kills)
        if run is None:
            return "not run"
        failed = f"; FAILED {run.failed} photos: {'; '.join(run.problems)}" if run.failed else ""
        return (
            f"{run.photos:,} photos, the job {run.state}{failed}; embedded twice "
            f"{run.twice:.0f}; longest wait after a kill "
            f"{run.longest_wait_s:.1f} s; the worker started {run.worker_starts}x"
        )

    return Figure(f"sync, queue Redis killed {kills}x: wall time", "s", value, context)


def twice(runs: list[KillRun], kills: int) -> float:
    run = by_kills(runs, kills)
    return run.twice if run else math.nan


def longest(runs: list[KillRun], kills: int) -> float:
    run = by_kills(runs, kills)
    return run.longest_wait_s if run else math.nan


FIGURES: list[Figure[list[KillRun]]] = [
    *(wall(k) for k in KILLS),
    Figure(
        "photos embedded twice, killed 5x",
        "photos",
        lambda runs: twice(runs, 5),
        lambda runs: (
            f"images Triton's image model embedded past the photos; killed 1x: "
            f"{twice(runs, 1):.0f}, 0x: {twice(runs, 0):.0f}"
        ),
    ),
    Figure(
        "longest wait for redelivery, killed 5x",
        "s",
        lambda runs: longest(runs, 5),
        lambda runs: (
            f"from a kill until the job's photos done moved again (killed 1x: "
            f"{longest(runs, 1):.1f} s); the lease is PHOTOSEARCH_INDEXER__LEASE_S (10 s), the "
            "visibility timeout 3,600 s"
        ),
    ),
]


def report(runs: list[KillRun]) -> None:
    print("\n| kills | wall s | embedded twice | longest wait s | waits s | worker starts |")
    print("|---:|---:|---:|---:|---|---:|")
    for run in runs:
        waits = ", ".join(f"{w:.1f}" for w in run.waits) or "-"
        print(
            f"| {run.kills} | {run.wall_s:.1f} | {run.twice:.0f} | {run.longest_wait_s:.1f} "
            f"| {waits} | {run.worker_starts} |"
        )


def run(args: argparse.Namespace) -> None:
    report(measure(args))


if __name__ == "__main__":
    run(parser().parse_args())
