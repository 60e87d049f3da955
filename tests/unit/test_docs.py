"""The documentation site builds in strict mode, its links hold, its settings table and API
reference are the code's, and every API operation carries an example."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml
from mkdocs.utils.yaml import get_yaml_loader
from pydantic import BaseModel

import query_api.schemas.admin
import query_api.schemas.answers
import query_api.schemas.search
from core.settings import Settings
from core.settings_doc import PAGE, marked_table, settings_table
from tests.support.deployfiles import leaf_variables

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _hooks() -> ModuleType:
    """docs/hooks.py, loaded from its file as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location("photosearch_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _hooks()


def _config() -> dict[str, Any]:
    with (ROOT / "mkdocs.yml").open(encoding="utf-8") as file:
        config: dict[str, Any] = yaml.load(file, Loader=get_yaml_loader())
    return config


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it (strict: any warning fails), in a folder of its own."""
    folder = tmp_path_factory.mktemp("site")
    built = _mkdocs(ROOT / "mkdocs.yml", folder)
    assert built.returncode == 0, built.stdout + built.stderr
    return folder


def test_the_site_builds_strictly_with_every_page_of_the_nav(site: Path) -> None:
    def pages(nav: list[Any]) -> list[str]:
        found: list[str] = []
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            found += pages(value) if isinstance(value, list) else [value]
        return found

    config = _config()
    assert config["strict"] is True
    nav = pages(config["nav"])
    # The generated pages of the benchmarks and the capacity plan stay where their tools
    # write them, and the navigation links them.
    assert {
        "benchmarks.md",
        "capacity-plan.md",
        "operating/settings.md",
        "api/reference.md",
    } <= set(nav)
    for page in nav:
        assert (DOCS / page).is_file(), page
        folder = page.removesuffix(".md").removesuffix("index")
        built = site / folder / "index.html"
        assert built.is_file(), built


def test_the_reference_renders_every_operation_of_the_app(site: Path) -> None:
    html = (site / "api" / "reference" / "index.html").read_text(encoding="utf-8")
    headings = {
        " ".join(re.sub(r"<[^>]+>|&para;", "", h).split())
        for h in re.findall(r"<h3[^>]*>(.*?)</h3>", html, re.S)
    }
    expected = {f"{m} {p}" for m, p, _ in _operations(HOOKS.openapi_schema())}
    assert expected <= headings, sorted(expected - headings)
    # Examples are the models' own, not made up by the renderer.
    assert "2024/06/red-bicycle.jpg" in html
    # A description's "<" reaches the page as text, not as the start of a tag.
    assert "Bearer &lt;API key" in html and "created_at &lt;= this" in html


def test_the_settings_page_is_the_code_s(site: Path) -> None:
    assert marked_table((ROOT / PAGE).read_text(encoding="utf-8")) == settings_table()
    built = (site / "operating" / "settings" / "index.html").read_text(encoding="utf-8")
    for variable in leaf_variables(Settings):
        assert variable in built, variable


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    ]


def _has_example(operation: dict[str, Any], models: dict[str, Any]) -> bool:
    """An example of the request (a parameter, the body) or of the successful answer."""

    def in_schema(schema: dict[str, Any]) -> bool:
        if "$ref" in schema:
            schema = models[schema["$ref"].rsplit("/", 1)[-1]]
        if isinstance(schema.get("items"), dict):
            return in_schema(schema["items"])
        return bool(schema.get("examples") or "example" in schema)

    def in_content(body: dict[str, Any]) -> bool:
        return any(
            "example" in content or content.get("examples") or in_schema(content.get("schema", {}))
            for content in body.get("content", {}).values()
        )

    parameters = operation.get("parameters", [])
    successes = [r for code, r in operation["responses"].items() if code.startswith("2")]
    return (
        any(p.get("examples") or "example" in p for p in parameters)
        or in_content(operation.get("requestBody", {}))
        or any(in_content(response) for response in successes)
    )


def test_every_operation_has_an_example() -> None:
    schema = HOOKS.openapi_schema()
    models = schema["components"]["schemas"]
    operations = _operations(schema)
    assert len(operations) >= 20
    missing = [f"{m} {p}" for m, p, op in operations if not _has_example(op, models)]
    assert not missing, f"operations without an example: {missing}"


def test_the_check_for_examples_sees_a_missing_one() -> None:
    models = {"Thing": {"type": "object"}, "Shown": {"type": "object", "examples": [{}]}}
    bare: dict[str, Any] = {"responses": {"200": {"content": {"application/json": {"schema": {}}}}}}
    assert not _has_example(bare, models)
    listed = {"$ref": "#/components/schemas/Shown"}
    answer = {"content": {"application/json": {"schema": {"type": "array", "items": listed}}}}
    assert _has_example({"responses": {"200": answer}}, models)
    error = {"content": {"application/json": {"schema": listed}}}
    assert not _has_example({"responses": {"422": error}}, models)  # an error is no example


@pytest.mark.parametrize(
    "modules",
    [(query_api.schemas.search, query_api.schemas.answers), (query_api.schemas.admin,)],
    ids=["search", "admin"],
)
def test_every_example_is_valid_for_its_model(modules: tuple[ModuleType, ...]) -> None:
    checked = 0
    models = {id(m): m for module in modules for m in vars(module).values()}
    for model in models.values():
        if isinstance(model, type) and issubclass(model, BaseModel) and model is not BaseModel:
            for example in model.model_json_schema().get("examples", []):
                model.model_validate(example)
                checked += 1
    assert checked >= 8


def test_the_reference_shows_the_models_examples_as_the_bodies_examples() -> None:
    shown = HOOKS.with_examples_shown(HOOKS.openapi_schema())
    search = shown["paths"]["/v1/search"]["post"]
    body = search["requestBody"]["content"]["application/json"]["example"]
    assert query_api.schemas.search.TextSearch.model_validate(body).q
    answer = search["responses"]["200"]["content"]["application/json"]["example"]
    assert query_api.schemas.answers.SearchResponse.model_validate(answer).results
    jobs = shown["paths"]["/v1/admin/jobs"]["get"]["responses"]["200"]["content"]
    [job] = jobs["application/json"]["example"]
    assert query_api.schemas.admin.Job.model_validate(job).id


def _page(src_uri: str, repo_url: str | None = None) -> tuple[Any, Any]:
    page = SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))
    config = SimpleNamespace(docs_dir=str(DOCS), repo_url=repo_url, edit_uri=None)
    return page, config


def test_links_to_the_repository_s_files_become_paths_or_links_to_its_host() -> None:
    markdown = (
        "See [the load tests](../../loadtests/README.md#the-soak-test), "
        "[Makefile](../../Makefile), [a page](../index.md) and [gone](../../no-such-file.md)."
    )
    page, config = _page("contributing/tests.md")
    assert HOOKS._link_repository_files(markdown, page, config) == (
        "See the load tests (`loadtests/README.md`), `Makefile`, [a page](../index.md) and "
        "[gone](../../no-such-file.md)."
    )
    page, config = _page("contributing/tests.md", "https://git.example.com/photosearch")
    assert (
        "[the load tests](https://git.example.com/photosearch/blob/main/loadtests/README.md"
        "#the-soak-test)" in HOOKS._link_repository_files(markdown, page, config)
    )


@pytest.mark.parametrize(
    ("link", "reported"),
    [
        ("[a page](missing.md)", "missing.md"),
        ("[a heading](other.md#no-such-heading)", "no-such-heading"),
        ("[a file](../../no-such-file.py)", "no-such-file.py"),
    ],
)
def test_a_broken_link_fails_the_build(tmp_path: Path, link: str, reported: str) -> None:
    """The site's own validation settings, on a site of two pages with one broken link."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n{link}\n", encoding="utf-8")
    (docs / "other.md").write_text("# Other\n\n## A heading\n", encoding="utf-8")
    config = {"site_name": "t", "strict": True, "validation": _config()["validation"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    built = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert reported in built.stdout + built.stderr

    (docs / "index.md").write_text("# Home\n\n[a heading](other.md#a-heading)\n", encoding="utf-8")
    assert _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site").returncode == 0


def test_the_readme_is_one_screen_whose_links_hold() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 70
    assert "make test" in readme and "make docs" in readme
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert local, "the README points to the documentation's pages"
    for target in local:
        assert (ROOT / target).exists(), target
