"""The exported encoders in this process, as the benchmarks time them: a session on the CPU
(raw, or as Triton's python backend runs it), typical queries, and the best rate of a few
repetitions."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import onnxruntime as ort

from model.precision import FP16_CPU_CRASH
from model.repository import version_dir

T = TypeVar("T")

# Typical stock-photo searches: 2-12 words, at most 16 tokens with start and end.
QUERIES = [
    "cat",
    "red bicycle against a brick wall",
    "sunset over the ocean",
    "business meeting",
    "golden retriever puppy in snow",
    "aerial view of a forest",
    "woman running on the beach",
    "coffee beans close-up",
    "new york skyline at night",
    "fresh vegetables at a market",
    "child blowing bubbles in a park",
    "rainy street in tokyo",
    "mountain lake at dawn",
    "wedding rings",
    "laptop on a wooden desk",
    "hot air balloons over cappadocia",
]


REPEATS = 3  # best of: on a shared machine other processes only ever slow a run down


def throughput(
    fn: Callable[[T], object], inputs: list[T], items_per_call: int, seconds: float
) -> float:
    """Items per second of fn over the inputs in turn: best of REPEATS runs, after a warm-up."""
    fn(inputs[0])
    best = 0.0
    for _ in range(REPEATS):
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            fn(inputs[calls % len(inputs)])
            calls += 1
        best = max(best, calls * items_per_call / elapsed)
    return best


def encoder(
    repo: Path,
    model: str,
    version: int,
    threads: int = 0,
    one_pool: bool = True,
    served: bool = False,
) -> ort.InferenceSession:
    """One encoder of an exported version in onnxruntime on the CPU. threads: intra-op (0: all
    cores); one_pool: one inter-op thread; served: as the python backend runs it, its idle
    threads blocking instead of spinning and the optimizer that breaks fp16 graphs off."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1 if one_pool else 0
    if served:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(
        str(version_dir(repo, model, version) / "model.onnx"),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=[FP16_CPU_CRASH] if served else None,
    )
