"""Rules of the test suite itself: no test sleeps for a while and hopes.

A sleep used to let something happen is flaky on a loaded machine and slow on an idle one: a
test waits for the event itself, through tests/support/waiting.py, whose helpers poll under
a ceiling that only bounds a hang.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# The helpers that may sleep: each polls for an event and takes the ceiling `timeout_s`.
WAITERS = {
    ("support/waiting.py", "wait_until"),
    ("support/waiting.py", "await_until"),
}
SLEEPS = {("time", "sleep"), ("asyncio", "sleep"), ("anyio", "sleep"), ("trio", "sleep")}


def sleeps(tree: ast.Module) -> list[tuple[int, str | None]]:
    """Each call to a sleep of `SLEEPS` (however imported or named): its line, and the
    function it is written in (None at module level)."""
    modules: dict[str, str] = {}  # local name -> module (import time as t)
    functions: set[str] = set()  # local names of a sleep (from time import sleep as nap)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                if (node.module, alias.name) in SLEEPS:
                    functions.add(alias.asname or alias.name)

    def is_sleep(call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Name):
            return func.id in functions
        return (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and (modules.get(func.value.id), func.attr) in SLEEPS
        )

    found: list[tuple[int, str | None]] = []

    def visit(node: ast.AST, inside: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            where = inside
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                where = child.name
            if isinstance(child, ast.Call) and is_sleep(child):
                found.append((child.lineno, inside))
            visit(child, where)

    visit(tree, None)
    return found


@cache
def parsed() -> dict[str, ast.Module]:
    """Every file of tests/, by its path under tests/."""
    return {
        path.relative_to(TESTS).as_posix(): ast.parse(path.read_text(), str(path))
        for path in sorted(TESTS.rglob("*.py"))
    }


def test_no_test_sleeps_but_the_helpers_that_wait_for_an_event() -> None:
    offending = [
        f"tests/{name}:{line} (in {function or 'the module'})"
        for name, tree in parsed().items()
        for line, function in sleeps(tree)
        if (name, function) not in WAITERS
    ]
    assert offending == [], "sleeps outside tests/support/waiting.py:\n" + "\n".join(offending)


def test_each_helper_that_may_sleep_takes_a_ceiling() -> None:
    trees = parsed()
    for name, function in WAITERS:
        [found] = [
            node
            for node in ast.walk(trees[name])
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
        ]
        arguments = [a.arg for a in (*found.args.args, *found.args.kwonlyargs)]
        assert "timeout_s" in arguments, f"tests/{name}: {function} takes no ceiling"


def test_the_rule_sees_a_sleep_however_it_is_imported() -> None:
    source = """
import time, asyncio as aio
from time import sleep as nap
from asyncio import sleep

def waits():
    time.sleep(1)

async def also():
    await aio.sleep(1)
    await sleep(1)
nap(1)
time.monotonic()
"""
    assert sleeps(ast.parse(source)) == [(7, "waits"), (10, "also"), (11, "also"), (12, None)]
