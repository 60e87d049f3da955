"""The tool kit beside the product (issue 43): loadtests/ holds at most a share of the product's
lines, so that a new benchmark shares the start-up the others use (loadtests/startup.py,
encoders.py) or replaces one whose figures no page quotes rather than growing the kit; and
none of its modules imports one that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.deployfiles import ROOT

KIT = ROOT / "loadtests"
PRODUCT = ("core", "indexer", "query_api", "model", "photosearch")
# Issue 43 asks for a quarter. Retiring the benchmarks no page quoted and sharing their
# start-up brought the kit from 33% to 28.4% (2026-11-29): the rest needs benchmarks that
# pages still quote to go. Lower this as they do, to 0.25; never raise it.
SHARE = 0.29


def lines(folder: Path) -> int:
    return sum(len(path.read_text().splitlines()) for path in folder.rglob("*.py"))


def test_the_tool_kit_stays_within_its_share_of_the_product() -> None:
    kit, product = lines(KIT), sum(lines(ROOT / name) for name in PRODUCT)
    assert kit <= SHARE * product, (
        f"loadtests/ has {kit} lines, {kit / product:.1%} of the product's {product} "
        f"(at most {SHARE:.0%}): share the benchmarks' start-up, or retire one no page quotes"
    )


def kit_imports(path: Path) -> set[str]:
    """The loadtests modules a module of the kit imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("loadtests.")}
        elif isinstance(node, ast.ImportFrom) and node.module == "loadtests":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loadtests."):
            found.add((node.module or "").split(".")[1])
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import circle of `graph` (module -> the modules it imports), as found by a walk
    from its first module in name order."""
    found: list[list[str]] = []
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> None:
        for imported in sorted(graph.get(module, set())):
            if imported in path:
                found.append([*path[path.index(imported) :], imported])
            elif imported not in done:
                walk(imported, [*path, imported])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            walk(module, [module])
    return found


def test_no_module_of_the_kit_imports_one_that_imports_it_back() -> None:
    graph = {path.stem: kit_imports(path) for path in KIT.glob("*.py")}
    assert "bench_api" in graph and "openloop" in graph["bench_api"]  # the graph is read
    assert not circles(graph), circles(graph)


def test_a_circle_is_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []
