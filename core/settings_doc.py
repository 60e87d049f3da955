"""The documentation's settings table (docs/operating/settings.md), generated from the settings
tree so that the two never drift."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from pydantic_settings import InitSettingsSource

from core.settings import Settings

START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"
PAGE = Path("docs/operating/settings.md")
WRITE_COMMAND = f"python -m core.settings_doc --write {PAGE}"

# A stand-in data directory: a default derived from it (model.repository, qdrant.path) then
# reads `DATA_DIR/models`, as the validator computes it, instead of this machine's home.
_DATA_DIR = Path("DATA_DIR")


def settings_table(settings_cls: type[Settings] = Settings) -> str:
    """One Markdown row per leaf setting: its variable, its default, its description."""
    config = settings_cls.model_config
    prefix = config.get("env_prefix") or ""
    delimiter = config.get("env_nested_delimiter") or "__"
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for path, default, meaning in _leaves(
        default_settings(settings_cls),
        default_settings(settings_cls, data_dir=_DATA_DIR),
        (),
    ):
        variable = f"{prefix}{delimiter.join(path)}".upper()
        lines.append(f"| {_cell(f'`{variable}`')} | {_cell(default)} | {_cell(meaning)} |")
    return "\n".join(lines)


def default_settings(settings_cls: type[Settings] = Settings, **values: object) -> Settings:
    """The code's defaults (and `values`), whatever this shell's PHOTOSEARCH_* would set: what
    the documentation shows."""
    return settings_cls(_build_sources=((InitSettingsSource(settings_cls, values),), {}))


def _leaves(
    defaults: BaseModel, derived: BaseModel, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """(name path, default, description) of each leaf, in declaration order, depth first."""
    for name, field in type(defaults).model_fields.items():
        value, derived_value = getattr(defaults, name), getattr(derived, name)
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(value, derived_value, (*path, name))
            continue
        if field.default is None:  # None means "derive it" where a validator fills it in
            value = derived_value
        yield (*path, name), _default(value), field.description or ""


def _default(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, Path):
        home = Path.home()
        text = (
            f"~/{value.relative_to(home).as_posix()}" if value.is_relative_to(home) else str(value)
        )
    elif isinstance(value, str):
        text = value or '""'
    elif isinstance(value, int | float):
        text = str(value)
    else:
        text = json.dumps(to_jsonable_python(value))
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _split(text: str) -> tuple[str, str, str]:
    before, start, rest = text.partition(f"{START}\n")
    table, end, after = rest.partition(f"\n{END}")
    if not (start and end) or START in rest or END in after:
        raise ValueError(f"expected one {START} and one {END} line, in that order")
    return before, table, after


def marked_table(text: str) -> str:
    """The table between a page's markers (ValueError unless it has both, once each)."""
    return _split(text)[1]


def write_table(path: Path) -> bool:
    """Rewrite the table between the markers in `path`; True if it changed."""
    text = path.read_text(encoding="utf-8")
    before, table, after = _split(text)
    if table == settings_table():
        return False
    path.write_text(f"{before}{START}\n{settings_table()}\n{END}{after}", encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--write", type=Path, metavar="PAGE", help=f"rewrite its settings table (e.g. {PAGE})"
    )
    args = parser.parse_args(argv)
    if args.write is None:
        print(settings_table())
    elif write_table(args.write):
        print(f"{args.write}: settings table rewritten")
    else:
        print(f"{args.write}: settings table already up to date")


if __name__ == "__main__":
    main()
