"""docs/benchmarks.md names the run of every row, and docs/capacity-plan.md quotes no measured
figure that page lacks."""

from __future__ import annotations

import re
from pathlib import Path

from harness.machine import ROOT, Occasion
from loadtests.benchmarks import RUN, Row, page, read_page, run_id, write
from loadtests.registry import BY_NAME

PAGE = ROOT / "docs" / "benchmarks.md"
PLAN = ROOT / "docs" / "capacity-plan.md"

TIMES = "\N{MULTIPLICATION SIGN}"
# A quoted figure: a number and a measured unit. A times sign after a space is arithmetic
# ("4 TIMES 100"), right after the number a ratio ("57TIMES").
QUOTE = re.compile(
    r"(?<![\w.~≈])(\d[\d,]*(?:\.\d+)?)(?:\*\*)?"
    rf"(?:({TIMES}|x)(?![\w])|\s?(ms|s|MB|MiB|B|%|[a-z]*/s)(?![\w/]))"
)
# What the plan does not claim to have measured: the design's load, assumptions and what is
# derived from them, exact sizes; a "~" or "≈" before a number marks an estimate.
NOT_MEASURED = re.compile(r"assum|extrapolat|unmeasured|estimat|\(exact\)", re.I)
DESIGN = re.compile(r"^## The load \(from the design\)$.*?^## ", re.M | re.S)
FOOTPRINT = re.compile(r"<!-- footprint:start -->.*?<!-- footprint:end -->", re.S)


def quotes(text: str) -> set[tuple[float, int, str]]:
    """(value, its decimals, unit) of every quoted figure; rates of anything as "/s"."""
    found = set()
    for match in QUOTE.finditer(text):
        number = match[1].replace(",", "")
        decimals = len(number.partition(".")[2])
        unit = (match[2] or match[3]).replace(TIMES, "x")
        found.add((float(number), decimals, "/s" if unit.endswith("/s") else unit))
    return found


def page_figures(text: str) -> set[tuple[float, int, str]]:
    """The figures in the page's text, and each row's value in its unit ("ms/query": ms)."""
    found = quotes(text)
    for row in read_page(text)[0]:
        unit = row.unit.split()[0].removesuffix("/query")
        found.add((float(row.value), len(row.value.partition(".")[2]), unit))
        found |= quotes(f"{row.value} {unit}")  # a rate's unit as the plan's quotes have it
    return found


def claims(plan: str) -> list[str]:
    """The plan's table rows and its prose sentence by sentence: what NOT_MEASURED is read
    against (an assumption made in one sentence covers what is derived from it there)."""
    design, footprint = DESIGN.sub("## ", plan), FOOTPRINT
    text = footprint.sub("", design)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    prose = " ".join(line.strip() for line in text.splitlines() if not line.startswith("|"))
    return rows + re.split(r"(?<=[.!?])\s+", prose)


def held(figure: tuple[float, int, str], figures: set[tuple[float, int, str]]) -> bool:
    """On the page at the precision of the page or of the quote, whichever is coarser."""
    value, decimals, unit = figure
    return any(
        unit == u and abs(value - v) <= 0.5 * 10 ** -min(decimals, d) + 1e-9 for v, d, u in figures
    )


def test_every_row_names_a_run_the_page_lists() -> None:
    rows, runs = read_page(PAGE.read_text())
    assert rows and runs
    assert {r.run for r in rows} == set(runs), "a row's run is not listed, or a run has no row"
    for row in rows:
        assert RUN.match(f"| {row.run} | x |"), row
        assert row.benchmark in BY_NAME, row
        float(row.value)  # a measured number, not "-" or "TODO"
    for name in BY_NAME:  # a benchmark runs whole: its rows come from one run
        assert len({r.run for r in rows if r.benchmark == name}) == 1, name


def test_writing_some_benchmarks_replaces_their_rows_and_keeps_the_others(tmp_path: Path) -> None:
    rows, runs = read_page(PAGE.read_text())
    path = tmp_path / "benchmarks.md"
    path.write_text(page(rows, runs))
    assert read_page(path.read_text()) == (rows, runs)

    at = Occasion.now("python -m loadtests.benchmarks --only decode")
    run = run_id(at)
    new = [
        Row("decode", r.figure, "1.0", r.unit, "new", run) for r in rows if r.benchmark == "decode"
    ]
    write(path, new, at, 60.0)
    after, after_runs = read_page(path.read_text())
    assert [r for r in after if r.benchmark == "decode"] == new
    assert [r for r in after if r.benchmark != "decode"] == [
        r for r in rows if r.benchmark != "decode"
    ]
    assert run in after_runs and "--only decode" in after_runs[run]


def test_the_capacity_plan_quotes_only_figures_the_benchmarks_page_holds() -> None:
    figures = page_figures(PAGE.read_text())
    missing = [
        (claim[:80], figure)
        for claim in claims(PLAN.read_text())
        if not NOT_MEASURED.search(claim)
        for figure in sorted(quotes(claim))
        if not held(figure, figures)
    ]
    assert not missing, f"figures of the capacity plan not on docs/benchmarks.md: {missing}"
