"""The api benchmark's load: the API driven open loop, phase by phase (a warm-up, cached
searches, uncached ones at a low rate, then rising rates), and the tables of its phases."""

from __future__ import annotations

import argparse
import asyncio
import random
from dataclasses import dataclass

import aiohttp

from harness.vocabulary import Queries
from loadtests import openloop
from loadtests.openloop import OPERATOR_KEY, Phase, Probe, keep_alive, one_request, search_target

CACHED_RATE = 100.0  # requests/s of the cached target
UNCACHED_P99_MS = 100.0
CONNECTIONS = 256  # most requests in flight; more wait for a connection (and that counts)


async def run_phase(
    http: aiohttp.ClientSession,
    probe: Probe,
    name: str,
    rate: float,
    queries: list[str],
    expect_cached: bool,
) -> Phase:
    """One search per query at `rate`/s (open loop); its row printed."""
    targets = [search_target(q) for q in queries]
    phase = await openloop.run_phase(http, probe, name, rate, targets, expect_cached)
    print(f"  {row(phase)}", flush=True)
    return phase


PHASE_HEADER = (
    "| phase | rate /s | requests | errors | cache flag wrong | achieved /s "
    "| p50 ms | p90 ms | p99 ms | max ms | server p50 ms | send lag p99 ms |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def row(p: Phase) -> str:
    return (
        f"| {p.name} | {p.rate:g} | {len(p.outcomes)} | {p.errors} | {p.wrong_cache} "
        f"| {p.achieved:.1f} | {p.ms(50):.1f} | {p.ms(90):.1f} | {p.ms(99):.1f} | {p.ms(100):.1f} "
        f"| {p.server_p50_ms():.1f} | {p.lag_p99_ms():.1f} |"
    )


# Server-Timing's stages (the API's histograms), then Triton's own view of the embed stage.
_STAGES = ("resolve", "cache", "tokenize", "embed", "search", "other", "total")
BREAKDOWN_HEADER = (
    "| phase | rate /s | "
    + " | ".join(f"API: {s}" for s in _STAGES)
    + " | Triton: request | Triton: queue | Triton: compute | Triton: mean batch |\n"
    + "|---|---:|"
    + "---:|" * (len(_STAGES) + 4)
)


def breakdown_row(p: Phase) -> str:
    b = p.breakdown
    stages = " | ".join(f"{b[f'stage_{s}_ms']:.2f}" for s in _STAGES)
    return (
        f"| {p.name} | {p.rate:g} | {stages} | {b['triton_request_ms']:.1f} "
        f"| {b['triton_queue_ms']:.1f} | {b['triton_infer_ms']:.1f} | {b['batch']:.2f} |"
    )


@dataclass
class LoadResults:
    warmup: Phase
    cached: Phase
    low: Phase
    steps: list[Phase]

    def highest_rate(self) -> float | None:
        """The highest uncached rate held at p99 <= UNCACHED_P99_MS; None when none was."""
        held = [p.rate for p in self.steps if p.holds(UNCACHED_P99_MS)]
        return max(held) if held else None


async def load(
    url: str, metrics: tuple[str, str], args: argparse.Namespace, queries: Queries
) -> LoadResults:
    """`metrics`: the API's and Triton's /metrics URLs."""
    probe = Probe(*metrics)
    # The operator's key: only it is told per answer whether the cache answered.
    async with keep_alive(url, CONNECTIONS, {"X-API-Key": OPERATOR_KEY}) as http:
        print("warm-up: 30 uncached searches at 10/s ...", flush=True)
        warmup = await run_phase(http, probe, "warm-up", 10, queries.take(30), expect_cached=False)

        popular = queries.take(args.cached_queries)
        print(f"pre-warming {len(popular)} cached queries ...", flush=True)
        for query in popular:
            answer = await one_request(
                http, search_target(query), asyncio.get_running_loop().time()
            )
            if answer.status != 200:
                raise RuntimeError(f"pre-warm search failed: {answer.status} {answer.error}")
        r = random.Random(1)
        draws = [r.choice(popular) for _ in range(round(CACHED_RATE * args.seconds))]
        print(f"cached, {CACHED_RATE:g}/s for {args.seconds:g} s ...", flush=True)
        cached = await run_phase(http, probe, "cached", CACHED_RATE, draws, expect_cached=True)

        count = max(1, round(args.low_rate * args.seconds))
        print(f"uncached, {args.low_rate:g}/s for {args.seconds:g} s ...", flush=True)
        low = await run_phase(
            http, probe, "uncached (low)", args.low_rate, queries.take(count), expect_cached=False
        )

        steps: list[Phase] = []
        failed_in_a_row = 0
        for rate in args.rates:
            print(f"uncached, {rate:g}/s for {args.seconds:g} s ...", flush=True)
            queries_now = queries.take(max(1, round(rate * args.seconds)))
            phase = await run_phase(http, probe, "uncached", rate, queries_now, expect_cached=False)
            steps.append(phase)
            failed_in_a_row = 0 if phase.holds(UNCACHED_P99_MS) else failed_in_a_row + 1
            if failed_in_a_row == 2 and not args.all_rates:
                print("  two rates in a row missed the target: stopping the steps", flush=True)
                break
        return LoadResults(warmup, cached, low, steps)
