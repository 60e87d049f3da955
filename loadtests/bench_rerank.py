"""Benchmark maximal marginal relevance (query_api.search.ranking.diversify) by pool size, against
the implementation it replaced (one matrix-vector product and eight array passes per pick).

    python -m loadtests.bench_rerank [--dim 512] [--repeat 3] [--deepest]

Random unit vectors of --dim (CLIP ViT-B-32's 512), scores falling with rank; each row picks
`count` from a pool of `pool`, as a diversified page at offset + limit = count - 1 does (the
pool is rerank_pool, 100, or offset + limit + 1 when larger).
The median of --repeat runs in this process; the two must pick the same photos.
--deepest adds the page the API now refuses (offset 10,000 + limit 100), before only.
Prints a Markdown table; no thresholds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from core.vectorstore import Hit
from harness.machine import machine
from query_api.search.ranking import diversify

# (pool, count): a default page and a page of 100 (the pool: RERANK_POOL, 100), pages ending
# at 500 and at DIVERSITY_WINDOW (1,000), the deepest the API diversifies (the pool is then
# offset + limit + 1, collapsed or not).
SIZES = [(101, 21), (101, 101), (1001, 501), (1001, 1001)]
DEEPEST = (10_101, 10_101)


def diversify_before(hits: Sequence[Hit], diversity: float, count: int) -> list[Hit]:
    """query_api.search.ranking.diversify as it was before the rewrite (commit 257eafa)."""
    vectors = np.stack([np.asarray(h.vector, dtype=np.float32) for h in hits])
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    scores = np.array([h.score for h in hits], dtype=np.float64)
    spread = scores.max() - scores.min()
    relevance = (scores - scores.min()) / spread if spread > 0 else np.ones_like(scores)
    chosen: list[int] = []
    closest = np.full(len(hits), -np.inf)
    available = np.ones(len(hits), dtype=bool)
    for _ in range(min(count, len(hits))):
        penalty = np.where(np.isfinite(closest), closest, 0.0)
        value = (1 - diversity) * relevance - diversity * penalty
        value[~available] = -np.inf
        best = int(np.argmax(value))
        chosen.append(best)
        available[best] = False
        closest = np.maximum(closest, vectors @ vectors[best])
    return [hits[i] for i in chosen]


def pool_of(size: int, dim: int, seed: int = 0) -> list[Hit]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((size, dim)).astype(np.float32)
    return [Hit(str(i), 1 - i / size, {}, vectors[i]) for i in range(size)]


def median_ms(run: Callable[[], list[Hit]], repeat: int) -> tuple[float, list[str]]:
    times, picked = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        picked = [h.photo_id for h in run()]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), picked


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--deepest", action="store_true")
    args = parser.parse_args()
    print(f"{machine()}\n")
    print("| pool | picks | before (ms) | after (ms) | same picks |")
    print("|---:|---:|---:|---:|---|")
    for pool, count in [*SIZES, *([DEEPEST] if args.deepest else [])]:
        hits = pool_of(pool, args.dim)
        before, old = median_ms(partial(diversify_before, hits, 0.5, count), args.repeat)
        if (pool, count) == DEEPEST:
            print(f"| {pool:,} | {count:,} | {before:,.1f} | refused (422) | - |")
            continue
        after, new = median_ms(partial(diversify, hits, 0.5, count), args.repeat)
        print(f"| {pool:,} | {count:,} | {before:,.1f} | {after:,.1f} | {old == new} |")


if __name__ == "__main__":
    main()
