"""The settings page's table is the one the settings tree generates, and lists every setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from core.settings import ModelSettings, Settings
from core.settings_doc import (
    END,
    PAGE,
    START,
    WRITE_COMMAND,
    default_settings,
    marked_table,
    settings_table,
    write_table,
)
from photosearch.cli import app
from tests.support.deployfiles import leaf_variables

ROOT = Path(__file__).parents[3]


def _rows(table: str) -> dict[str, list[str]]:
    """Variable -> [default, meaning], asserting that no variable has two rows."""
    rows: dict[str, list[str]] = {}
    for line in table.splitlines()[2:]:
        variable, default, meaning = (cell.strip() for cell in line.strip("|").split(" | "))
        assert variable.strip("`") not in rows, f"{variable} has two rows"
        rows[variable.strip("`")] = [default, meaning]
    return rows


def test_the_settings_page_table_is_the_generated_one() -> None:
    table = marked_table((ROOT / PAGE).read_text(encoding="utf-8"))
    assert table == settings_table(), (
        f"{PAGE}'s settings table is stale: run `{WRITE_COMMAND}` (or paste the output of "
        f"`photosearch settings` between {START} and {END})"
    )


def test_the_readme_holds_no_settings_table() -> None:
    """The settings live on the documentation site's page, never a second copy in the README."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert START not in readme and "PHOTOSEARCH_API__PORT" not in readme


def test_write_rewrites_only_the_block_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text(f"# Title\n\n{START}\n| old | table |\n{END}\n\nAfter.\n", encoding="utf-8")
    assert write_table(page)
    text = page.read_text(encoding="utf-8")
    assert text == f"# Title\n\n{START}\n{settings_table()}\n{END}\n\nAfter.\n"
    assert not write_table(page)
    page.write_text("# No markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="settings-table:start"):
        write_table(page)


def test_every_leaf_setting_has_exactly_one_row_with_a_description() -> None:
    table = settings_table()
    assert table.splitlines()[:2] == ["| Variable | Default | Meaning |", "|---|---|---|"]
    rows = _rows(table)
    assert list(rows) == leaf_variables(Settings)
    assert all(meaning for _, meaning in rows.values())


def test_defaults_are_read_from_the_code_and_rendered_readably() -> None:
    rows = _rows(settings_table())
    assert rows["PHOTOSEARCH_DATA_DIR"][0] == "`~/.local/share/photosearch`"
    assert rows["PHOTOSEARCH_MODEL__REPOSITORY"][0] == "`DATA_DIR/models`"
    assert rows["PHOTOSEARCH_QDRANT__PATH"][0] == "`DATA_DIR/vectors`"
    assert rows["PHOTOSEARCH_QDRANT__URL"][0] == "unset"
    assert rows["PHOTOSEARCH_QDRANT__ON_DISK"][0] == "`true`"
    assert rows["PHOTOSEARCH_S3__ANONYMOUS"][0] == "`false`"
    assert rows["PHOTOSEARCH_MODEL__TEXT_QUEUE_DELAY_US"][0] == "`5000`"
    assert rows["PHOTOSEARCH_INDEXER__METADATA_FILES"][0] == '`["photos.jsonl", "photos.csv"]`'
    assert rows["PHOTOSEARCH_API__KEYS"][0] == "`[]`"


def test_the_environment_does_not_leak_into_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = settings_table()
    monkeypatch.setenv("PHOTOSEARCH_DATA_DIR", "/elsewhere")
    monkeypatch.setenv("PHOTOSEARCH_MODEL__TEXT_PAD_MULTIPLE", "16")
    assert settings_table() == expected
    defaults = default_settings()
    assert defaults.model.text_pad_multiple == 8
    assert default_settings(data_dir=Path("/x")).data_dir == Path("/x")


class _WarmModelSettings(ModelSettings):
    warmup_rounds: int = Field(3, description="Warm-up passes | per version.")


class _LimitSettings(BaseModel):
    per_minute: int = Field(60, description="Requests per minute.")


class _QuotaSettings(BaseModel):
    enabled: bool = Field(False, description="Enforce quotas.")
    limits: _LimitSettings = _LimitSettings()


class _ExtendedSettings(Settings):
    model: _WarmModelSettings = _WarmModelSettings()
    quota: _QuotaSettings = _QuotaSettings()


def test_settings_added_to_the_tree_appear_without_changing_the_generator() -> None:
    rows = _rows(settings_table(_ExtendedSettings))
    variables = list(rows)
    assert variables == leaf_variables(_ExtendedSettings)
    added = ["PHOTOSEARCH_MODEL__WARMUP_ROUNDS", "PHOTOSEARCH_QUOTA__ENABLED"]
    assert variables.index(added[0]) == variables.index("PHOTOSEARCH_MODEL__TEXT_PAD_MULTIPLE") + 1
    assert variables[-2:] == [added[1], "PHOTOSEARCH_QUOTA__LIMITS__PER_MINUTE"]
    assert rows[added[0]] == ["`3`", "Warm-up passes \\| per version."]
    assert rows["PHOTOSEARCH_QUOTA__LIMITS__PER_MINUTE"] == ["`60`", "Requests per minute."]


def test_photosearch_settings_prints_the_table() -> None:
    result = CliRunner().invoke(app, ["settings"])
    assert result.exit_code == 0, result.output
    assert result.output == settings_table() + "\n"
