"""Every product module has a test that imports it.

A product module is a .py file under core/, indexer/, query_api/, model/ or photosearch/, less
the package __init__ files that hold nothing but a docstring and imports. A module has a direct
test when a test file (tests/**/test_*.py or a conftest.py) imports it: `import a.b`,
`from a.b import x`, or `from a import b`. A helper under tests/support/ that imports a module
is not a test of it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "indexer", "query_api", "model", "photosearch")

# Modules run, not imported, and the test that runs them so (what it must say to do that).
RUN_NOT_IMPORTED = {
    # Triton's python backend imports the file with its own triton_python_backend_utils.
    "model.python_backend.model": (
        "tests/unit/model/test_python_backend.py",
        "spec_from_file_location",
    ),
    # `python -m photosearch`: importing it would run the command line.
    "photosearch.__main__": ("tests/unit/photosearch/test_main.py", '"-m", "photosearch"'),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def only_imports(path: Path) -> bool:
    """An __init__ with nothing but a docstring, imports and __all__: no code of its own."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            continue
        return False
    return True


def product_modules() -> set[str]:
    return {
        module_name(path)
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if not (path.name == "__init__.py" and only_imports(path))
    }


def imported_names(path: Path) -> set[str]:
    """Every dotted name a file imports, and `a.b` for each `from a import b`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def files_of_tests() -> list[Path]:
    return [
        path
        for path in (ROOT / "tests").rglob("*.py")
        if path.name.startswith("test_") or path.name == "conftest.py"
    ]


def modules_with_a_test() -> set[str]:
    imported = set().union(*(imported_names(path) for path in files_of_tests()))
    return {m for m in product_modules() if m in imported} | set(RUN_NOT_IMPORTED)


def test_every_product_module_has_a_test_that_imports_it() -> None:
    untested = product_modules() - modules_with_a_test()
    assert not untested, f"product modules no test imports: {sorted(untested)}"


def test_the_modules_run_not_imported_are_run_by_their_test() -> None:
    for module, (test, how) in RUN_NOT_IMPORTED.items():
        assert module in product_modules()
        assert how in (ROOT / test).read_text(), test


def test_the_count_sees_imports_of_every_form(tmp_path: Path) -> None:
    test = tmp_path / "test_x.py"
    test.write_text("import a.b\nfrom c.d import e\nfrom f import g\nfrom .h import i\n")
    assert imported_names(test) == {"a.b", "c.d", "c.d.e", "f", "f.g"}
