"""The soak script (`python -m loadtests.soak`): a half-minute run on a `photosearch up` it
starts, its report checked against its raw data, and verdicts that fail when they should."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from redis import Redis

from harness.processes import free_ports
from harness.up import newcomer_env
from loadtests.records import Records, latency, read
from loadtests.soak import MEMORY, Verdict, per_minute, thirds, verdicts
from loadtests.soakmemory import Growth, RssSample, bounds, read_rss, rss_growth
from loadtests.system import SyncWatch
from tests.support.deployfiles import ROOT
from tests.support.redisserver import RedisServer

# Short: each figure is checked against the raw data of the run, whatever its length, and the
# memory windows each hold four samples, as a long run's do.
DURATION, WARMUP, WINDOW, RSS_EVERY = 30.0, 5.0, 10.0, 2.5


@pytest.fixture(scope="module")
def soak(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Half a minute at 4/s with a sync every 10 s, on the tiny model (exported beforehand, so
    the start takes seconds), sampling memory every 2.5 s."""
    base = tmp_path_factory.mktemp("soak")
    shutil.copytree(repository, base / "data" / "models")
    out = base / "report"
    (api,) = free_ports(1)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "loadtests.soak", "--start", "--variants", "60"),
            *("--rate", "4", "--duration", str(DURATION), "--sync-every", str(WINDOW)),
            *("--warmup", str(WARMUP), "--window", str(WINDOW), "--rss-every", str(RSS_EVERY)),
            *("--port", str(api), "--data-dir", str(base / "data"), "--out", str(out)),
        ],
        cwd=ROOT,
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == str(out / "report.md")
    return out, json.loads((out / "soak.json").read_text())


def test_the_per_minute_figures_and_thirds_are_those_of_the_requests(
    soak: tuple[Path, dict[str, Any]],
) -> None:
    out, data = soak
    records = read(out / "requests.csv")
    t0 = data["t0"]
    minute = records.between(t0, t0 + min(60.0, DURATION))
    assert len(minute) > 0
    assert data["minutes"][0]["count"] == len(minute)
    assert data["minutes"][0]["errors"] == int((~minute.ok).sum())
    assert data["minutes"][0]["p99"] == pytest.approx(
        np.percentile(minute.latency_ms[minute.ok], 99)
    )
    # The first and last thirds of the run, the p99 of their answered requests.
    third = DURATION / 3
    for key, (a, b) in (("first_third", (0, third)), ("last_third", (DURATION - third, DURATION))):
        part = records.between(t0 + a, t0 + b)
        assert data[key]["count"] == len(part)
        assert data[key]["p99"] == pytest.approx(np.percentile(part.latency_ms[part.ok], 99))
    report = (out / "report.md").read_text()
    assert f"| 0 | {len(minute)} | " in report


def test_memory_is_sampled_for_every_process_of_up_and_compared_after_the_warm_up(
    soak: tuple[Path, dict[str, Any]],
) -> None:
    out, data = soak
    samples = read_rss(out / "rss.csv")
    processes = {s.process for s in samples}
    # The supervisor, its children, and Triton's python-backend stub of each model.
    assert {"up", "api", "triton", "redis", "redis-cache", "beat"} <= processes, processes
    stubs = [p for p in processes if p.startswith("triton/")]
    assert any("clip_image" in p for p in stubs) and any("clip_text" in p for p in stubs)
    assert all(s.rss_mib > 0 for s in samples)
    for entry in data["rss"]:
        mine = [s for s in samples if s.process == entry["process"]]
        start = statistics.median(s.rss_mib for s in mine if WARMUP <= s.at_s < WARMUP + WINDOW)
        end = statistics.median(s.rss_mib for s in mine if s.at_s >= DURATION - WINDOW)
        assert entry["start_mib"] == pytest.approx(start, abs=1e-3)  # the CSV keeps 3 decimals
        assert entry["end_mib"] == pytest.approx(end, abs=1e-3)
        assert entry["growth"] == pytest.approx((end - start) / start, abs=1e-4)
    assert {e["process"] for e in data["rss"]} == processes
    # The query cache's Redis is held to the maxmemory `up` gave it, every other one to flat.
    judged = {e["process"]: e for e in data["rss"]}
    cache = judged.pop("redis-cache")
    assert cache["bound_mib"] == 64 and cache["limit_mib"] > 64
    peak = max(s.rss_mib for s in samples if s.process == "redis-cache")
    assert cache["peak_mib"] == pytest.approx(peak, abs=1e-3)
    assert all(e["bound_mib"] is None for e in judged.values())
    report = (out / "report.md").read_text()
    assert "redis-cache bounded by its maxmemory 64 MiB" in report
    assert "| bounded: peak <= 96 MiB (maxmemory 64 MiB + 25% + 16 MiB) |" in report


def test_the_syncs_ran_one_after_the_other_and_the_report_has_a_verdict_each(
    soak: tuple[Path, dict[str, Any]],
) -> None:
    out, data = soak
    assert len(data["syncs"]) >= 2  # 10 s apart within half a minute, each one done
    assert all(s["state"] == "done" for s in data["syncs"])
    report = (out / "report.md").read_text()
    assert [v["criterion"] for v in data["verdicts"]] == [
        "no errors",
        "p99 stable (last third within 1.5x the first)",
        "resident memory: every process flat (grows < 10%), a bounded one within its bound",
    ]
    assert MEMORY == data["verdicts"][2]["criterion"]
    for verdict in data["verdicts"]:
        word = "PASS" if verdict["passed"] else "FAIL"
        assert f"- **{word}** {verdict['criterion']}" in report
    assert data["verdicts"][0]["passed"], data["verdicts"][0]["detail"]


def _records(latencies: list[float], ok: bool = True) -> Records:
    n = len(latencies)
    return Records(
        np.arange(n, dtype=np.float64),
        np.array(["text"] * n),
        np.array(latencies, dtype=np.float64),
        np.full(n, 200 if ok else 503, dtype=np.int64),
        np.array(["" if ok else "503"] * n),
    )


def _flat(process: str, mib: float, rise: float) -> list[RssSample]:
    """Samples every 10 s for 30 min, rising by `rise` (a share) over the run."""
    return [RssSample(t, process, 1, mib * (1 + rise * t / 1800)) for t in range(0, 1801, 10)]


def test_a_20_percent_rise_in_memory_fails_and_a_flat_one_passes() -> None:
    fine = latency(_records([10.0] * 100))
    samples = _flat("api", 500, 0.0) + _flat("triton", 300, 0.20)
    growth = rss_growth(samples, warmup_s=300, window_s=300, end_s=1800)
    by_name = {g.process: g for g in growth}
    assert by_name["api"].share == pytest.approx(0.0)
    # The windows' medians fall at t = 445 s (samples 300..590) and t = 1650 s (1500..1800).
    start, end = 1 + 0.2 * 445 / 1800, 1 + 0.2 * 1650 / 1800
    assert by_name["triton"].share == pytest.approx((end - start) / start)
    memory = verdicts(fine, fine, fine, growth, [])[2]
    assert not memory.passed and "triton" in memory.detail
    flat = rss_growth(_flat("api", 500, 0.05), 300, 300, 1800)
    assert verdicts(fine, fine, fine, flat, [])[2].passed


def test_a_bounded_cache_is_judged_by_its_bound_and_fails_past_it() -> None:
    """A cache with a maxmemory grows to it by design: held to the bound and an allowance
    (64 MiB: 64 x 1.25 + 16 = 96 MiB), not to flatness; past that it fails, as does the same
    growth in a process with no bound."""
    fine = latency(_records([10.0] * 100))
    api = _flat("api", 500, 0.0)

    def judged(rise: float, bound: dict[str, float] | None) -> tuple[Growth, Verdict]:
        samples = api + _flat("redis-cache", 12, rise)
        growth = rss_growth(samples, 300, 300, 1800, bound)
        cache = next(g for g in growth if g.process == "redis-cache")
        return cache, verdicts(fine, fine, fine, growth, [])[2]

    # 12 -> 84 MiB: seven times its size, yet within the bound's 96 MiB.
    filled, memory = judged(6.0, {"redis-cache": 64.0})
    assert filled.share > 1 and filled.peak_mib == pytest.approx(84.0)
    assert filled.limit_mib == pytest.approx(96.0) and filled.held and memory.passed
    assert filled.criterion == "bounded: peak <= 96 MiB (maxmemory 64 MiB + 25% + 16 MiB)"
    assert "bounded: redis-cache peak 84 MiB of 96 MiB allowed" in memory.detail
    # 12 -> 108 MiB: past it (a leak, or a bound not kept).
    over, memory = judged(8.0, {"redis-cache": 64.0})
    assert over.peak_mib == pytest.approx(108.0) and not over.held and not memory.passed
    assert "not held: redis-cache peak 108 MiB of 96 MiB allowed" in memory.detail
    # Without a bound the same growth is judged flat, and fails.
    unbounded, memory = judged(6.0, None)
    assert unbounded.bound_mib is None and unbounded.criterion == "flat: grows < 10%"
    assert not unbounded.held and not memory.passed
    # The bound holds over the whole run: a peak during the warm-up counts too.
    spike = [RssSample(5.0, "redis-cache", 1, 200.0), *_flat("redis-cache", 12, 0.0)]
    (early,) = rss_growth(spike, 300, 300, 1800, {"redis-cache": 64.0})
    assert early.peak_mib == 200.0 and not early.held


def test_the_bound_is_the_maxmemory_the_cache_server_keeps(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "cache") as server:
        client = Redis.from_url(server.url)
        try:
            pid = int(client.info("server")["process_id"])
            assert bounds(server.url, {"redis-cache": pid}) == {}  # no maxmemory: no bound
            client.config_set("maxmemory", str(48 * 2**20))
            assert bounds(server.url, {"redis": pid + 1, "redis-cache": pid}) == {
                "redis-cache": 48.0
            }
            assert bounds(server.url, {"redis": pid + 1}) == {}  # not a child of this `up`
        finally:
            client.close()
    assert bounds(server.url, {"redis-cache": pid}) == {}  # none answers
    assert bounds(None, {"redis-cache": pid}) == {}


def test_errors_a_failed_sync_p99_drift_and_a_restart_each_fail_their_verdict() -> None:
    fine = latency(_records([10.0] * 100))
    steady = [Growth("api", 500, 510, 1)]
    assert all(v.passed for v in verdicts(fine, fine, fine, steady, []))
    failed = latency(_records([10.0] * 5, ok=False))
    assert not verdicts(failed, fine, fine, steady, [])[0].passed
    sync = SyncWatch("job1", 0.0, {}, {"state": "failed"})
    assert not verdicts(fine, fine, fine, steady, [sync])[0].passed
    slower = latency(_records([16.0] * 100))  # p99 1.6x the first third's
    assert not verdicts(fine, fine, slower, steady, [])[1].passed
    assert not verdicts(fine, fine, fine, [Growth("api", 500, 510, 2)], [])[2].passed


def test_per_minute_splits_the_load_into_minutes() -> None:
    records = _records([5.0] * 150)  # one request a second from t = 0
    minutes = per_minute(records, 0.0, 150.0)
    assert [m.count for m in minutes] == [60, 60, 30]
    first, last = thirds(records, 0.0, 150.0)
    assert (first.count, last.count) == (50, 50)
