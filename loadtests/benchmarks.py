"""Run the benchmarks and print one Markdown table of their headline figures.

    python -m loadtests.benchmarks [--only decode,model,...] [--quick] [--write docs/benchmarks.md]

Which benchmarks there are, and how each runs quick or in full, is loadtests/registry.py; each
module's measure() runs with its own defaults (--quick: short and small, for a first look and
the tests; not figures to publish). The model-based ones share one model repository
(var/benchmarks/models: exported once, then kept), api and recall one store (var/benchmarks/api).
Progress goes to stderr, the table to stdout. --write replaces the rows of the benchmarks run in
the page and keeps the others': every row names its run (date and commit), and the page lists
each run's machine, load and command. No thresholds: the context says what the design asked.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.machine import ROOT, Occasion
from harness.models import WORK, default_repository, ensure_model
from loadtests.registry import BENCHMARKS, BY_NAME, Benchmark

HEADER = (
    "| benchmark | figure | value | unit | what the issue asked / context | run |\n"
    "|---|---|---:|---|---|---|"
)
ROW = re.compile(r"^\| ([a-z]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| (.*) \| ([^|]+) \|$")
RUNS_HEADER = "| run | machine | load at the start | took | command |\n|---|---|---:|---:|---|"
RUN = re.compile(r"^\| (\d{4}-\d\d-\d\d \d\d:\d\d [0-9a-f]{7,}\S*) \| (.*) \|$")


@dataclass(frozen=True)
class Row:
    benchmark: str
    figure: str
    value: str
    unit: str
    context: str
    run: str  # "YYYY-MM-DD HH:MM commit": a line of the page's runs table

    def markdown(self) -> str:
        cells = (self.benchmark, self.figure, self.value, self.unit, self.context, self.run)
        return "| " + " | ".join(cells) + " |"


def number(value: float) -> str:
    """Three significant digits or so, never in exponent form: the table is read by people."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def run_id(at: Occasion) -> str:
    return f"{at.started:%Y-%m-%d %H:%M} {at.commit}"


def table(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(r.markdown() for r in rows)])


def read_page(text: str) -> tuple[list[Row], dict[str, str]]:
    """The rows of a page this command wrote, and its runs (id -> the rest of the line)."""
    rows = [Row(*(c.strip() for c in m.groups())) for m in map(ROW.match, text.splitlines()) if m]
    rows = [r for r in rows if r.benchmark != "benchmark"]
    runs = {m[1]: m[2] for m in map(RUN.match, text.splitlines()) if m}
    return rows, runs


# -- running them ------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shown(arg: str) -> str:
    """An argument as a reader reruns it, from the repository's root: paths inside it relative."""
    path = Path(arg)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else arg


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


def arguments(bench: Benchmark, quick: bool, arch: str, model: Path | None) -> list[str]:
    argv = list(bench.quick) if quick else []
    if model is not None:
        argv += ["--arch", arch, "--repository", str(model)]
    if bench.api_store:  # a store per size: a --quick run must not rebuild the 1e5 one
        argv += ["--data-dir", str(WORK / ("api-quick" if quick else "api"))]
    return argv


def alone(bench: Benchmark) -> str:
    """The command that reruns one benchmark in full, printing all its tables."""
    argv = arguments(bench, False, "ViT-B-32", default_repository() if bench.uses_model else None)
    return shlex.join(["python", "-m", bench.module, *map(shown, argv)])


def run(names: Sequence[str], quick: bool, arch: str, repository: Path, at: Occasion) -> list[Row]:
    """The rows of the named benchmarks, stamped with this run."""
    rows: list[Row] = []
    model: Path | None = None
    for bench in (b for b in BENCHMARKS if b.name in names):
        if bench.uses_model and model is None:
            progress(f"== the shared model: {shown(str(repository))}")
            with contextlib.redirect_stdout(sys.stderr):
                ensure_model(repository, arch)
            model = repository
        module = bench.load()
        argv = arguments(bench, quick, arch, model if bench.uses_model else None)
        progress(f"== {bench.name}: {shlex.join(['python', '-m', bench.module, *argv])}")
        started = time.monotonic()
        # The modules print their progress on stdout: here stdout is for the table alone.
        with own_environment(), contextlib.redirect_stdout(sys.stderr):
            figures = module.measure(module.parser().parse_args(argv))
        progress(f"== {bench.name}: {time.monotonic() - started:.0f} s")
        rows += [
            Row(
                bench.name, f.name, number(f.value(figures)), f.unit, f.context(figures), run_id(at)
            )
            for f in bench.figures()
        ]
    return rows


# -- the page ------------------------------------------------------------------------------------


def page(rows: Sequence[Row], runs: dict[str, str]) -> str:
    order = {b.name: i for i, b in enumerate(BENCHMARKS)}
    rows = sorted(rows, key=lambda r: order[r.benchmark])  # stable: each one's own order
    used = sorted({r.run for r in rows})
    about = [f"- **{b.name}**: {b.about} Alone: `{alone(b)}`" for b in BENCHMARKS]
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "<!-- Written by `python -m loadtests.benchmarks --write docs/benchmarks.md`: rerun",
            "it rather than edit this page. A run of some (--only) replaces their rows and keeps",
            "the others'; each row names the run it came from, listed under Runs.",
            "tests/unit/loadtests/test_benchmarks_page.py checks both, and that",
            "docs/capacity-plan.md quotes no figure this page lacks. -->",
            "",
            "## Figures",
            "",
            table(rows),
            "",
            "## Runs",
            "",
            "Each row's run: when (UTC) and the commit that ran (+dirty: with uncommitted "
            "changes). Other work on the machine skews every figure: compare rows of one run, "
            "or runs of one machine, quiet.",
            "",
            RUNS_HEADER,
            *(f"| {run} | {runs[run]} |" for run in used),
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
            "python -m loadtests.benchmarks --write docs/benchmarks.md  # every row: ~1.5 h",
            "make bench ARGS='--write docs/benchmarks.md'               # the same",
            "python -m loadtests.benchmarks --only api --write docs/benchmarks.md  # api's rows",
            "python -m loadtests.benchmarks --quick                     # a first look: minutes",
            "```",
            "",
            "The first run exports the model into var/benchmarks/models and builds the API's "
            "100,000-vector store in var/benchmarks/api; later runs reuse both. Run it on a "
            "quiet machine: the figures are for comparing runs, not thresholds.",
            "",
        ]
    )


def write(path: Path, rows: Sequence[Row], at: Occasion, took_s: float) -> None:
    """The page with these rows, and the rows of the benchmarks not run kept as they were."""
    kept, runs = read_page(path.read_text()) if path.exists() else ([], {})
    ran = {r.benchmark for r in rows}
    kept = [r for r in kept if r.benchmark not in ran and r.benchmark in BY_NAME]
    runs[run_id(at)] = f"{at.machine} | {at.load:.2f} | {took_s / 60:.1f} min | `{at.command}`"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page([*kept, *rows], runs))


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
        default=default_repository(),
        help="the model repository the benchmarks share (default: var/benchmarks/models)",
    )
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    at = Occasion.now(shlex.join(["python", "-m", "loadtests.benchmarks", *given]))
    clock = time.monotonic()
    rows = run(args.only, args.quick, args.arch, args.repository.resolve(), at)
    print(table(rows), flush=True)
    if args.write is not None:
        write(args.write, rows, at, time.monotonic() - clock)
        progress(f"wrote {args.write}")


if __name__ == "__main__":
    main()
