"""The site's build hooks: the HTTP API's reference from the app's own schema, and links to
the repository's files outside docs/."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

# The reference page names the schema with this tag; neoteroi's plugin renders the file.
SCHEMA_TAG = "[OAD(photosearch-openapi)]"
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")
_state: dict[str, Path] = {}


def openapi_schema() -> dict[str, Any]:
    """The query API's OpenAPI schema, as the app built with the default settings serves it."""
    from core.settings_doc import default_settings
    from query_api.app import create_app

    schema: dict[str, Any] = create_app(default_settings()).openapi()
    return schema


def with_examples_shown(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with each body's example beside it: a model's own `examples` copied to the
    request or response content that refers to it, which the reference then shows as the
    example (neoteroi would call one it finds in the model generated)."""
    models = schema.get("components", {}).get("schemas", {})

    def example_of(body: dict[str, Any]) -> Any:
        if isinstance(body.get("items"), dict):
            item = example_of(body["items"])
            return None if item is None else [item]
        ref = body.get("$ref", "")
        model = models.get(ref.rsplit("/", 1)[-1], {}) if ref else body
        examples = model.get("examples")
        return examples[0] if isinstance(examples, list) and examples else None

    for operation in (op for ops in schema.get("paths", {}).values() for op in ops.values()):
        bodies = [operation.get("requestBody", {}), *operation.get("responses", {}).values()]
        for body in bodies:
            for content in body.get("content", {}).values():
                if "example" in content or "examples" in content:
                    continue
                example = example_of(content.get("schema", {}))
                if example is not None:
                    content["example"] = example
    return schema


def with_text_escaped(schema: dict[str, Any]) -> dict[str, Any]:
    """The operations' and parameters' descriptions with `<` escaped: the reference puts them
    in HTML, where "Bearer <API key>" would lose its "<API key>" as an unknown tag (the
    schemas shown as code keep theirs)."""
    for operation in (op for ops in schema.get("paths", {}).values() for op in ops.values()):
        for item in [operation, *operation.get("parameters", [])]:
            for name in ("summary", "description"):
                if isinstance(item.get(name), str):
                    item[name] = item[name].replace("<", "&lt;")
    return schema


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    folder = Path(tempfile.mkdtemp(prefix="photosearch-docs-"))
    path = folder / "openapi.json"
    schema = with_text_escaped(with_examples_shown(openapi_schema()))
    path.write_text(json.dumps(schema, indent=2), encoding="utf-8")
    _state["schema"] = path
    return config


# Before neoteroi's plugin (priority 0), which reads the file the tag names.
@event_priority(100)
def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if SCHEMA_TAG in markdown:
        markdown = markdown.replace(SCHEMA_TAG, f"[OAD({_state['schema'].as_posix()})]")
    return _link_repository_files(markdown, page, config)


def _link_repository_files(markdown: str, page: Page, config: MkDocsConfig) -> str:
    """A link from a page to a file of the repository outside docs/ (`../../loadtests/README.md`)
    becomes a link to that file on the repository's host where `repo_url` is set, else the
    path in code; a link to a file that does not exist is left for MkDocs to report."""
    docs = Path(config.docs_dir).resolve()
    root = docs.parent
    page_dir = PurePosixPath(page.file.src_uri).parent

    def replace(match: re.Match[str]) -> str:
        text, target = match["text"], match["target"]
        if "://" in target or target.startswith(("#", "/", "mailto:")):
            return match[0]
        path, _, anchor = target.partition("#")
        resolved = (docs / page_dir / path).resolve()
        if resolved.is_relative_to(docs) or not resolved.is_relative_to(root):
            return match[0]
        if not resolved.exists():
            return match[0]
        relative = resolved.relative_to(root).as_posix()
        if config.repo_url:
            url = f"{config.repo_url.rstrip('/')}/blob/{_branch(config)}/{relative}"
            return f"[{text}]({url}{'#' + anchor if anchor else ''})"
        return f"`{relative}`" if text.strip("`") == relative else f"{text} (`{relative}`)"

    return _LINK.sub(replace, markdown)


def _branch(config: MkDocsConfig) -> str:
    edit_uri = config.edit_uri or ""
    parts = [p for p in edit_uri.split("/") if p]
    return parts[1] if len(parts) > 1 and parts[0] in {"edit", "blob"} else "main"
