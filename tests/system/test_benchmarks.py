"""`python -m loadtests.benchmarks`: one table of the benchmarks' figures, and docs/benchmarks.md
holding a row for every figure the command knows, each naming its run. Nothing here times
anything: figures are checked to be numbers, never against thresholds."""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loadtests.benchmarks import HEADER, read_page
from loadtests.registry import BY_NAME, figure_names
from tests.support.deployfiles import ROOT

DOCS = ROOT / "docs" / "benchmarks.md"
QUICK = ["decode", "scale", "store"]  # no shared model export: a minute or so


def figures_of(text: str) -> dict[tuple[str, str], str]:
    """(benchmark, figure) -> the value cell, for every row of the figures table in `text`."""
    rows: dict[tuple[str, str], str] = {}
    for row in read_page(text)[0]:
        key = (row.benchmark, row.figure)
        assert key not in rows, f"{key} appears twice"
        rows[key] = row.value
    return rows


def table_lines(text: str) -> list[str]:
    """The figures table's lines: from its header to the first line that is not a row."""
    lines = text.splitlines()
    start = lines.index(HEADER.splitlines()[0])
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))


def known(names: list[str]) -> set[tuple[str, str]]:
    return {(bench, figure) for bench in names for figure in figure_names()[bench]}


def number(cell: str) -> float:
    value = float(cell)  # "-", "TODO", "n/a" and the like raise here
    assert math.isfinite(value), cell
    return value


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, Path, datetime]:
    """The real command on the quick subset, writing a page over a stale one."""
    page = tmp_path_factory.mktemp("benchmarks") / "benchmarks.md"
    page.write_text("a stale page\n")
    started = datetime.now(UTC)
    command = ["--only", ",".join(QUICK), "--quick", "--write", str(page)]
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.benchmarks", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, result.stderr, page, started


def test_quick_run_prints_a_row_per_figure_with_a_positive_value(
    quick_run: tuple[str, str, Path, datetime],
) -> None:
    stdout, stderr, _, _ = quick_run
    rows = figures_of(stdout)
    assert set(rows) == known(QUICK)
    for key, cell in rows.items():
        assert number(cell) > 0, key
    # stdout is the table alone; the benchmarks' own progress went to stderr.
    assert table_lines(stdout) == [line for line in stdout.splitlines() if line.strip()]
    assert all(f"== {name}" in stderr for name in QUICK)


def test_write_makes_a_page_with_date_commit_command_and_the_same_table(
    quick_run: tuple[str, str, Path, datetime],
) -> None:
    stdout, _, page, started = quick_run
    text = page.read_text()
    assert "stale" not in text
    assert table_lines(text) == table_lines(stdout)

    rows, runs = read_page(text)
    [run] = {row.run for row in rows}  # every row names this run
    date, _, commit = run.rpartition(" ")
    written = datetime.strptime(date, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    assert started - timedelta(minutes=1) <= written <= datetime.now(UTC)
    # The commit that ran: HEAD's, or an ancestor's where others committed during the run.
    ran = subprocess.run(
        ["git", "merge-base", "--is-ancestor", commit.removesuffix("+dirty"), "HEAD"], cwd=ROOT
    )
    assert re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", commit) and ran.returncode == 0, commit
    machine, _, _, command = (cell.strip() for cell in runs[run].split(" | "))
    assert re.fullmatch(r".+, \d+ cores, .+ RAM, GPU: .+", machine), machine
    only = ",".join(QUICK)
    assert command == f"`python -m loadtests.benchmarks --only {only} --quick --write {page}`"


def test_an_unknown_benchmark_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.benchmarks", "--only", "decode,nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert f"choose from {', '.join(BY_NAME)}" in result.stderr
    assert result.stdout == ""


def test_the_docs_page_has_a_row_for_every_figure_and_no_other() -> None:
    rows = figures_of(DOCS.read_text())
    everything = known(list(figure_names()))
    missing, stale = sorted(everything - set(rows)), sorted(set(rows) - everything)
    assert not missing, f"rows the docs lack (rerun its --write): {missing}"
    assert not stale, f"rows the command no longer prints (rerun its --write): {stale}"


def test_the_docs_page_holds_measured_numbers() -> None:
    rows, runs = read_page(DOCS.read_text())
    for row in rows:
        assert number(row.value) >= 0, row
    # Each run measured in full: no --quick figures on the page.
    for run, rest in runs.items():
        assert "--quick" not in rest, run


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Each table of `text`: its rows (the header's first, the --- line left out) of cells."""
    tables: list[list[list[str]]] = []
    last = False
    for line in text.splitlines():
        row = line.startswith("|")
        if row and not line.startswith("|---"):
            if not last:
                tables.append([])
            tables[-1].append([cell.strip() for cell in line.split("|")[1:-1]])
        last = row
    return tables


def test_the_scale_benchmark_measures_every_phase_of_a_reindex(tmp_path: Path) -> None:
    """bench_scale --reindex at tiny sizes: a row per phase of the reindex, with its time, its
    cost per photo or change and its memory at both sizes and their growth; the new collection
    matched the live one, the job switched, and a grouping pass of a sample is extrapolated."""
    command = ["--reindex", "--sizes", "1500,3000", "--shard-size", "500"]
    command += ["--changes", "60", "--drain", "10", "--group-shards", "4", "--work", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-m", "loadtests.bench_scale", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    [phases] = markdown_tables(result.stdout)
    assert phases[0] == [
        "phase",
        *("1,500: wall s", "1,500: CPU s", "1,500: cost", "1,500: RSS MB"),
        *("3,000: wall s", "3,000: CPU s", "3,000: cost", "3,000: RSS MB"),
        *("wall per 10x", "CPU per 10x", "RSS per 10x"),
    ]
    rows = {row[0]: row[1:] for row in phases[1:]}
    assert list(rows) == [
        "load: planning",
        "load: writing points",
        "index build",
        "grouping pass",
        "catch-up replay",
        "verification",
        "switch: live lock",
    ]
    for name, row in rows.items():
        unit = "ms/change" if name in ("catch-up replay", "switch: live lock") else "µs/photo"
        for at in (0, 4):
            wall, cpu, cost, rss = row[at : at + 4]
            assert number(wall) >= 0 and number(cpu) >= 0, (name, row)  # 0.00: nothing built
            assert cost.endswith(unit) and number(cost.split()[0]) >= 0, (name, row)
            assert number(rss) >= 0, (name, row)  # peak RSS growth, MB
    assert number(rows["load: writing points"][0]) > 0, rows
    assert result.stdout.count("verification found 0 problems") == 2, result.stdout
    assert "catch-up per change, largest / smallest catalogue:" in result.stdout
    assert "grouping pass: 4 of 6 shards grouped, time extrapolated" in result.stdout
