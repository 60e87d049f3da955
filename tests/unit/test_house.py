"""The house's size rules (docs/contributing/architecture.md): rooms of at most 20 modules, no
module over 400 lines, no circle of imports, a tool kit that does not grow past its share of
the product, and an architecture page that draws every room.

Each rule names what breaks it, so the next module that grows past one is split where it is
written, not found by a review a year later.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("core", "indexer", "query_api", "model", "photosearch")
TOOLS = ("loadtests", "harness", "photosearch_client")
MAX_MODULES = 20  # a folder's modules, its __init__ aside
MAX_LINES = 400


def modules(packages: tuple[str, ...]) -> Iterator[Path]:
    for package in packages:
        yield from sorted((ROOT / package).rglob("*.py"))


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_folder_of_the_product_holds_more_than_twenty_modules() -> None:
    crowded = {}
    for package in PRODUCT:
        for folder in [ROOT / package, *(ROOT / package).rglob("*/")]:
            count = sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")
            if count > MAX_MODULES:
                crowded[str(folder.relative_to(ROOT))] = count
    assert crowded == {}


def test_no_module_of_the_product_or_its_tools_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules(PRODUCT + TOOLS)
        if (n := lines(path)) > MAX_LINES
    }
    assert long == {}


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append(
                        (other, iter(sorted(graph.find_modules_directly_imported_by(other))))
                    )
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_circles_are_found_where_there_are_some() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(name)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.b")
    graph.add_import(importer="a.d", imported="a.b")
    assert circles(graph) == [["a.b", "a.c"]]


def test_no_circle_of_imports_in_the_product_or_its_tools() -> None:
    # Imports under TYPE_CHECKING count: a circle drawn for the type checker is still a circle
    # for the reader.
    graph = grimp.build_graph(*PRODUCT, *TOOLS, cache_dir=None)
    assert circles(graph) == []


# Issue 43 asks for a quarter. Retiring the benchmarks whose figures no page quotes and
# sharing their start-up brought loadtests/ from 33% to 29.1% of the product (2026-11-29):
# what is left is quoted. Lower this as benchmarks fold into one another, to 0.25; never
# raise it: a new benchmark shares the others' start-up (loadtests/startup.py, encoders.py)
# or replaces one.
TOOL_KIT_SHARE = 0.30


def test_the_tool_kit_stays_within_its_share_of_the_product() -> None:
    product = sum(lines(path) for path in modules(PRODUCT))
    tool_kit = sum(lines(path) for path in modules(("loadtests",)))
    assert tool_kit <= TOOL_KIT_SHARE * product, (
        f"loadtests/ is {tool_kit / product:.1%} of the product (at most {TOOL_KIT_SHARE:.0%})"
    )


def test_the_architecture_page_draws_every_room_of_the_product() -> None:
    page = (ROOT / "docs/contributing/architecture.md").read_text(encoding="utf-8")
    rooms = [
        init.parent.relative_to(ROOT).as_posix()
        for package in PRODUCT
        for init in sorted((ROOT / package).rglob("__init__.py"))
        if init.parent != ROOT / package
    ]
    # A room is named by its path, or drawn in the tree of its side (`├── photo/`).
    undrawn = [
        room
        for room in rooms
        if f"{room}/" not in page and f"── {room.rsplit('/', 1)[-1]}/" not in page
    ]
    assert undrawn == []
