"""Benchmark the model path: text at 77 tokens vs the batch's longest, images by batch size,
raw onnxruntime vs through Triton. Prints a Markdown table; no thresholds (machines are noisy).

    python -m loadtests.bench_model [--arch ViT-B-32] [--repository DIR] [--seconds 2]

A --repository given is re-configured (its config.pbtxt rewritten) while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnxruntime as ort

from core.embedding.arrays import AnyArray
from core.embedding.client import EmbeddingClient
from core.embedding.manifest import IMAGE_MODEL, TEXT_MODEL, list_versions, load_manifest
from core.embedding.tokenizer import ClipTokenizer, pad_batch
from harness.machine import commit, machine
from harness.processes import triton_ports
from loadtests.encoders import QUERIES, REPEATS, encoder, throughput
from loadtests.registry import Figure
from model.repository import write_configs
from model.triton_config import BatchingOptions
from model.triton_server import TritonServer

T = TypeVar("T")


async def athroughput(
    fn: Callable[[T], Awaitable[object]], inputs: list[T], items_per_call: int, seconds: float
) -> float:
    """throughput() for coroutines."""
    await fn(inputs[0])
    best = 0.0
    for _ in range(REPEATS):
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            await fn(inputs[calls % len(inputs)])
            calls += 1
        best = max(best, calls * items_per_call / elapsed)
    return best


async def singles_at_once(client: EmbeddingClient, version: int, ids: list[list[int]]) -> object:
    """8 single-query callers at once: Triton's dynamic batcher forms the batches."""
    return await asyncio.gather(
        *(client.encode_token_ids([row], model_version=version) for row in ids[:8])
    )


def text_batches(tokenizer: ClipTokenizer, batch: int, multiple: int) -> list[AnyArray]:
    ids = tokenizer.encode_batch(QUERIES)
    return [pad_batch(ids[i : i + batch], multiple, 77) for i in range(0, len(ids), batch)]


def raw_figures(repo: Path, version: int, seconds: float) -> dict[str, float]:
    manifest = load_manifest(repo, version)
    tokenizer = ClipTokenizer.from_repository(repo, version)
    text = encoder(repo, TEXT_MODEL, version)
    image = encoder(repo, IMAGE_MODEL, version)
    out: dict[str, float] = {}
    for batch in (1, 8):
        for label, multiple in (("77", 77), ("longest", 1)):
            rows = text_batches(tokenizer, batch, multiple)
            out[f"text b{batch} {label}"] = throughput(
                lambda r: text.run(None, {"input_ids": r}), rows, batch, seconds
            )
    size = manifest.image.size
    rng = np.random.default_rng(0)
    for batch in (1, 8, 32):
        pixels = rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8)
        out[f"image b{batch}"] = throughput(
            lambda p: image.run(None, {"image": p}), [pixels], batch, seconds
        )
    return out


async def triton_figures(repo: Path, version: int, url: str, seconds: float) -> dict[str, float]:
    manifest = load_manifest(repo, version)
    out: dict[str, float] = {}
    for label, multiple in (("77", 77), ("longest", 1)):
        async with EmbeddingClient(url, repo, pad_multiple=multiple, text_timeout_s=60) as client:
            ids = await client.tokenize(QUERIES, model_version=version)
            for batch in (1, 8):
                groups = [ids[i : i + batch] for i in range(0, len(ids), batch)]
                out[f"text b{batch} {label}"] = await athroughput(
                    partial(client.encode_token_ids, model_version=version), groups, batch, seconds
                )
            out[f"text c8 {label}"] = await athroughput(
                partial(singles_at_once, client, version), [ids], 8, seconds
            )
    async with EmbeddingClient(url, repo) as client:
        size = manifest.image.size
        rng = np.random.default_rng(0)
        for batch in (1, 8, 32):
            pixels = rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8)
            out[f"image b{batch}"] = await athroughput(
                partial(client.encode_images, model_version=version), [pixels], batch, seconds
            )
    return out


def report(
    raw: dict[str, float], no_delay: dict[str, float], via: dict[str, float], arch: str
) -> str:
    lines = [
        f"{arch}, {machine()}, onnxruntime {ort.__version__}, commit {commit()}, "
        f"{time.strftime('%Y-%m-%d')}",
        "",
        "Triton's overhead is measured with queue delays 0; the last columns use the exported",
        "delays (text 5 ms; image 50 ms while it waits for a preferred batch of 16/32/64).",
        "",
        "| workload (b: batch per call, c: concurrent single calls) | raw onnxruntime /s "
        "| Triton, delay 0 /s | overhead | Triton, configured delays /s | vs raw |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    def ratio(value: float | None, base: float | None) -> str:
        return f"{(value / base - 1) * 100:+.1f}%" if value and base else ""

    for key in sorted(set(raw) | set(via), key=lambda k: (k.split()[0], k)):
        r, z, t = raw.get(key), no_delay.get(key), via.get(key)
        lines.append(
            f"| {key} | {cell(r)} | {cell(z)} | {ratio(z, r)} | {cell(t)} | {ratio(t, r)} |"
        )
    for where, figures in (("raw", raw), ("Triton delay 0", no_delay), ("Triton", via)):
        for batch in (1, 8):
            speedup = figures[f"text b{batch} longest"] / figures[f"text b{batch} 77"]
            lines.append(f"\n{where}, text batch {batch}: longest vs 77 tokens = {speedup:.1f}x")
    return "\n".join(lines)


@dataclass
class ModelFigures:
    """Items/s by workload (report()'s keys): raw, through Triton with queue delays 0 and with
    the exported ones."""

    arch: str
    raw: dict[str, float]
    no_delay: dict[str, float]
    via: dict[str, float]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="ViT-B-32")
    parser.add_argument("--repository", type=Path, help="an exported repository (default: export)")
    parser.add_argument("--seconds", type=float, default=2.0, help="per repetition")
    return parser


def measure(args: argparse.Namespace) -> ModelFigures:
    with tempfile.TemporaryDirectory() as tmp:
        repo = args.repository
        if repo is None:
            from model.export import export_model

            repo = Path(tmp) / "models"
            print(f"exporting {args.arch} (random weights) ...", flush=True)
            export_model(args.arch, "none", repo)
        version = list_versions(repo)[-1]
        print("raw onnxruntime ...", flush=True)
        raw = raw_figures(repo, version, args.seconds)
        target = load_manifest(repo, version).target
        figures = []
        for options in (BatchingOptions(0, 0), BatchingOptions()):
            print(f"through Triton, {options} ...", flush=True)
            write_configs(repo, target, options)
            with TritonServer(repo, triton_ports(), Path(tmp) / "triton") as server:
                figures.append(asyncio.run(triton_figures(repo, version, server.url, args.seconds)))
        return ModelFigures(load_manifest(repo, version).arch, raw, figures[0], figures[1])


# -- its rows in docs/benchmarks.md (loadtests/registry.py) -------------------------------------


def text_ms(figures: dict[str, float]) -> float:
    """ms per query of one query at a time, padded to its own length."""
    return 1000 / figures["text b1 longest"]


FIGURES: list[Figure[ModelFigures]] = [
    Figure(
        "text encoder, 1 query padded to 77 tokens",
        "q/s",
        lambda f: f.raw["text b1 77"],
        lambda f: "raw onnxruntime, 16 typical stock-photo queries in turn",
    ),
    Figure(
        "text encoder, 1 query at its own length",
        "q/s",
        lambda f: f.raw["text b1 longest"],
        lambda f: "the same queries, not padded (the export takes any length <= 77)",
    ),
    Figure(
        "dynamic length / 77 tokens, 1 query",
        "x",
        lambda f: f.raw["text b1 longest"] / f.raw["text b1 77"],
        lambda f: "asked: own length vs 77 tokens; same embeddings (CLIP's text tower is causal)",
    ),
    Figure(
        "dynamic length / 77 tokens, batches of 8",
        "x",
        lambda f: f.raw["text b8 longest"] / f.raw["text b8 77"],
        lambda f: (
            f"{f.raw['text b8 longest']:.0f} vs {f.raw['text b8 77']:.0f} q/s; "
            "a batch is padded to its longest query"
        ),
    ),
    Figure(
        "text, 1 query, raw onnxruntime",
        "ms/query",
        lambda f: text_ms(f.raw),
        lambda f: "in this process, at its own length",
    ),
    Figure(
        "text, 1 query, through Triton",
        "ms/query",
        lambda f: text_ms(f.no_delay),
        lambda f: "Triton's python backend on the CPU, queue delays 0, gRPC from this process",
    ),
    Figure(
        "Triton overhead, text, 1 query",
        "x",
        lambda f: text_ms(f.no_delay) / text_ms(f.raw),
        lambda f: (
            "asked: Triton's overhead (time through Triton / raw onnxruntime); "
            f"{text_ms(f.no_delay) - text_ms(f.raw):+.1f} ms a query"
        ),
    ),
    Figure(
        "Triton overhead, image batch of 32",
        "x",
        lambda f: f.raw["image b32"] / f.no_delay["image b32"],
        lambda f: (
            f"time through Triton / raw: {f.raw['image b32']:.1f} img/s raw, "
            f"{f.no_delay['image b32']:.1f} img/s through Triton"
        ),
    ),
    Figure(
        "text, 8 concurrent single queries through Triton",
        "q/s",
        lambda f: f.via["text c8 longest"],
        lambda f: (
            "with the exported 5 ms text queue delay: Triton's dynamic batcher forms the "
            f"batches ({f.no_delay['text c8 longest']:.0f} q/s with delay 0)"
        ),
    ),
]


def main() -> None:
    figures = measure(parser().parse_args())
    print(report(figures.raw, figures.no_delay, figures.via, figures.arch))


if __name__ == "__main__":
    main()
