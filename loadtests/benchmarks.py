"""Run the benchmarks and print one Markdown table of their headline figures.

    python -m loadtests.benchmarks [--only decode,model,indexer,api,scale] [--quick]
                                   [--write docs/benchmarks.md]

Each benchmark is a loadtests/bench_*.py module, run through its measure() with its own
defaults (--quick: short durations and small sizes, for a first look and the tests; not figures
to publish). model, indexer and api share one model repository (var/benchmarks/models: exported
once, then kept). Progress goes to stderr, the table to stdout; --write (re)writes a page with
the date, the machine, the commit and the command beside it. No thresholds: the last column says
what the design asked, where it asked something.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.embedding.manifest import list_versions
from loadtests.api_setup import ROOT, ensure_model
from loadtests.benchmark_rows import BENCHMARKS, BY_NAME, Benchmark
from loadtests.machine import Occasion

WORK = ROOT / "var" / "benchmarks"
HEADER = (
    "| benchmark | figure | value | unit | what the issue asked / context |\n|---|---|---:|---|---|"
)


@dataclass(frozen=True)
class Row:
    benchmark: str
    figure: str
    value: float
    unit: str
    context: str

    def markdown(self) -> str:
        return (
            f"| {self.benchmark} | {self.figure} | {number(self.value)} | {self.unit} "
            f"| {self.context} |"
        )


def number(value: float) -> str:
    """Three significant digits or so, never in exponent form: the table is read by people."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def table(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(r.markdown() for r in rows)])


# ---------------------------------------------------------------------------------------------
# Running them.


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shown(arg: str) -> str:
    """An argument as a reader reruns it, from the repository's root: paths inside it relative."""
    path = Path(arg)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else arg


def shared_model(repository: Path, arch: str) -> Path:
    """The repository model, indexer and api share: exported (random weights) on first use."""
    if repository == WORK / "models" and repository.is_dir() and not list_versions(repository):
        shutil.rmtree(repository)  # our own export, interrupted: ensure_model refuses the rest
    with contextlib.redirect_stdout(sys.stderr):
        ensure_model(repository, arch)
    return repository


@contextlib.contextmanager
def own_environment() -> Iterator[None]:
    """bench_api points PHOTOSEARCH_* at its own store for its API process: undo that after, so
    each benchmark gets the environment this command was given."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def arguments(bench: Benchmark[Any], quick: bool, arch: str, model: Path | None) -> list[str]:
    argv = list(bench.quick) if quick else []
    if model is not None:
        argv += ["--arch", arch, "--repository", str(model)]
    if bench.name == "api":  # a store per size: a --quick run must not rebuild the 1e5 one
        argv += ["--data-dir", str(WORK / ("api-quick" if quick else "api"))]
    return argv


def run(
    names: Sequence[str], quick: bool, arch: str, repository: Path
) -> tuple[list[Row], dict[str, str]]:
    """The rows of the named benchmarks, and the command that reruns each one alone."""
    rows: list[Row] = []
    commands: dict[str, str] = {}
    model: Path | None = None
    for bench in (b for b in BENCHMARKS if b.name in names):
        if bench.uses_model and model is None:
            progress(f"== the shared model: {shown(str(repository))}")
            model = shared_model(repository, arch)
        argv = arguments(bench, quick, arch, model if bench.uses_model else None)
        alone = ["python", "-m", bench.measure.__module__, *map(shown, argv)]
        commands[bench.name] = shlex.join(alone)
        progress(f"== {bench.name}: {commands[bench.name]}")
        args = bench.parser().parse_args(argv)
        started = time.monotonic()
        # The modules print their progress on stdout: here stdout is for the table alone.
        with own_environment(), contextlib.redirect_stdout(sys.stderr):
            figures = bench.measure(args)
        progress(f"== {bench.name}: {time.monotonic() - started:.0f} s")
        rows += [
            Row(bench.name, f.name, f.value(figures), f.unit, f.context(figures))
            for f in bench.figures
        ]
    return rows, commands


# ---------------------------------------------------------------------------------------------
# The page: the table with what a reader needs to trust or redo it.


def page(rows: Sequence[Row], commands: dict[str, str], at: Occasion, took_s: float) -> str:
    about = [
        f"- **{name}**: {BY_NAME[name].about} Alone, with all its tables: `{commands[name]}`"
        for name in commands
    ]
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "<!-- Written by `python -m loadtests.benchmarks --write docs/benchmarks.md`: rerun",
            "it rather than edit this page; tests/system/test_benchmarks.py checks that it has",
            "a row for every figure the command prints. -->",
            "",
            f"- date: {at.started:%Y-%m-%d %H:%M} UTC (took {took_s / 60:.1f} min)",
            f"- machine: {at.machine}",
            f"- load average at the start: {at.load:.2f} (other work on the machine skews every "
            "figure: compare runs of one machine, quiet)",
            f"- commit: {at.commit}",
            f"- command: `{at.command}`",
            "",
            "## Figures",
            "",
            table(rows),
            "",
            "## What the rows are",
            "",
            "The model is ViT-B-32 with random weights (its speed does not depend on them), "
            "exported for Triton's CPU target (onnxruntime in the python backend), Triton and "
            "the rest on the same cores. Rates are the best of repetitions where a benchmark "
            "repeats; latencies are percentiles of one run.",
            "",
            *about,
            "",
            "## Rerun",
            "",
            "```sh",
            "python -m loadtests.benchmarks --write docs/benchmarks.md  # this page",
            "make bench ARGS='--write docs/benchmarks.md'               # the same",
            "python -m loadtests.benchmarks --only api,scale            # a subset, printed only",
            "python -m loadtests.benchmarks --quick                     # a first look: minutes",
            "```",
            "",
            "The first run exports the model into var/benchmarks/models and builds the API's "
            "100,000-vector store in var/benchmarks/api; later runs reuse both. Run it on a "
            "quiet machine: the figures are for comparing runs, not thresholds.",
            "",
        ]
    )


def names(text: str) -> list[str]:
    chosen = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in BY_NAME]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(BY_NAME)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only",
        type=names,
        default=list(BY_NAME),
        metavar="NAME[,NAME]",
        help=f"run these only, of {','.join(BY_NAME)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="short and small: a first look")
    parser.add_argument("--write", type=Path, metavar="PATH", help="(re)write this page too")
    parser.add_argument("--arch", default="ViT-B-32", help="exported when the repository is empty")
    parser.add_argument(
        "--repository",
        type=Path,
        default=WORK / "models",
        help="the model repository the benchmarks share (default: var/benchmarks/models)",
    )
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    at = Occasion.now(shlex.join(["python", "-m", "loadtests.benchmarks", *given]))
    clock = time.monotonic()
    rows, commands = run(args.only, args.quick, args.arch, args.repository.resolve())
    print(table(rows), flush=True)
    if args.write is not None:
        text = page(rows, commands, at, time.monotonic() - clock)
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
        progress(f"wrote {args.write}")


if __name__ == "__main__":
    main()
