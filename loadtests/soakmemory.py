"""The soak's memory: every process of `photosearch up` sampled, and each judged by its kind:
flat, or, where it has a memory bound of its own (the query cache's Redis), within it.

A cache with `maxmemory` is meant to grow until it reaches its bound and to stay there, so
"flat" would fail it for doing its job; it is held to its bound instead, which still fails
where the bound is missing or not kept (a leak, a bound never applied).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
from redis import Redis
from redis.exceptions import RedisError

from harness.processes import descendants

MODELS = ("clip_image", "clip_text")
RSS_GROWTH_MAX = 0.10
RSS_FIELDS = ("at_s", "process", "pid", "rss_mib")
# A Redis's resident memory above its maxmemory (which counts only the data): an empty
# server takes ~12 MiB (its code, libraries, buffers), and the allocator's fragmentation from
# evicting adds up to a quarter (jemalloc's RSS / used 1.19-1.24 here, 64 MB filled and churned
# through 40,000 evictions of 2 KB embeddings). A cache without its bound outgrows this.
BOUND_SLACK_MIB = 16.0
BOUND_SLACK_SHARE = 0.25


@dataclass(frozen=True)
class RssSample:
    """One process's resident memory at `at_s` seconds after the load began."""

    at_s: float
    process: str  # a label that survives a restart: its role in `photosearch up`
    pid: int
    rss_mib: float


@dataclass(frozen=True)
class Growth:
    """A process's memory: the median of its samples just after the warm-up and at the end;
    for a process with a bound of its own, the bound and its largest sample."""

    process: str
    start_mib: float
    end_mib: float
    pids: int  # more than one: it was restarted during the run
    bound_mib: float | None = None  # its own memory bound (a cache's maxmemory); None: none
    peak_mib: float = math.nan  # its largest sample over the whole run

    @property
    def share(self) -> float:
        return (self.end_mib - self.start_mib) / self.start_mib if self.start_mib else math.nan

    @property
    def limit_mib(self) -> float | None:
        """What its RSS may reach: the bound and the allowance above it; None without one."""
        if self.bound_mib is None:
            return None
        return self.bound_mib * (1 + BOUND_SLACK_SHARE) + BOUND_SLACK_MIB

    @property
    def held(self) -> bool:
        """Flat (grows less than RSS_GROWTH_MAX), or never above its limit where it has one."""
        limit = self.limit_mib
        return self.share < RSS_GROWTH_MAX if limit is None else self.peak_mib <= limit

    @property
    def criterion(self) -> str:
        """The one it is judged by, with its numbers."""
        limit = self.limit_mib
        if limit is None or self.bound_mib is None:
            return f"flat: grows < {RSS_GROWTH_MAX:.0%}"
        return (
            f"bounded: peak <= {limit:.0f} MiB (maxmemory {self.bound_mib:.0f} MiB "
            f"+ {BOUND_SLACK_SHARE:.0%} + {BOUND_SLACK_MIB:.0f} MiB)"
        )

    def said(self) -> str:
        """How it went, in a few words."""
        if self.bound_mib is None:
            return (
                f"{self.process} {self.share:+.1%} ({self.start_mib:.0f} -> {self.end_mib:.0f} MiB)"
            )
        return f"{self.process} peak {self.peak_mib:.0f} MiB of {self.limit_mib:.0f} MiB allowed"


def processes(supervisor: int, children: dict[str, int]) -> dict[int, str]:
    """Every process of a `photosearch up`, each by a label that a restart keeps: `up`, its
    children by their role (api, triton, redis, redis-cache, beat...), theirs by role/command
    (Triton's python-backend stubs by the model they serve)."""
    role = {pid: name for name, pid in children.items()}
    labels = {supervisor: "up"}
    for pid in sorted(descendants(supervisor)):
        if pid in role:
            labels[pid] = role[pid]
            continue
        try:
            process = psutil.Process(pid)
            parents = [p.pid for p in process.parents()]
            command, name = " ".join(process.cmdline()), process.name()
        except psutil.Error:
            continue  # gone since
        owner = next((role[p] for p in parents if p in role), "up")
        model = next((m for m in MODELS if m in command), "")
        labels[pid] = f"{owner}/{name or '?'}" + (f" ({model})" if model else "")
    seen: dict[str, int] = {}
    for pid in sorted(labels):  # two of one kind (worker pool processes): number them
        n = seen[labels[pid]] = seen.get(labels[pid], 0) + 1
        if n > 1:
            labels[pid] = f"{labels[pid]} #{n}"
    return labels


def bounds(cache_url: str | None, children: Mapping[str, int]) -> dict[str, float]:
    """The children with a memory bound of their own, in MiB: the Redis the query cache's URL
    reaches, where it is one of them (its pid, INFO server) and has a maxmemory. Asked of the
    server itself, so the bound judged is the one it keeps, not the one it was meant to get."""
    if cache_url is None:
        return {}
    client = Redis.from_url(cache_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        pid = int(client.info("server")["process_id"])
        maxmemory = int(str(client.config_get("maxmemory")["maxmemory"]))
    except (RedisError, OSError, KeyError, ValueError):
        return {}
    finally:
        client.close()
    names = [name for name, child in children.items() if child == pid]
    return {names[0]: maxmemory / 2**20} if names and maxmemory else {}


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


def rss_growth(
    samples: list[RssSample],
    warmup_s: float,
    window_s: float,
    end_s: float,
    bound: Mapping[str, float] | None = None,
) -> list[Growth]:
    """Each process's memory over [warmup, warmup + window] against the last window, and for
    those with a `bound` (MiB, by process) their largest sample.

    Medians over windows as long as the sync interval: each window then holds one sync's
    indexing and its quiet time, so a batch in flight at one instant is not taken for growth.
    The peak is over every sample: a bound holds from the start, warm-up included.
    """
    out = []
    for process in sorted({s.process for s in samples}):
        mine = [s for s in samples if s.process == process]
        start = [s.rss_mib for s in mine if warmup_s <= s.at_s < warmup_s + window_s]
        end = [s.rss_mib for s in mine if s.at_s >= end_s - window_s]
        if start and end:
            pids = len({s.pid for s in mine})
            limit = (bound or {}).get(process)
            peak = max(s.rss_mib for s in mine) if limit is not None else math.nan
            out.append(
                Growth(
                    process,
                    statistics.median(start),
                    statistics.median(end),
                    pids,
                    limit,
                    peak,
                )
            )
    return out
