"""Optional metadata beside the photos: a JSONL or CSV manifest of id, path, title, tags, ..."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.payload import PhotoPayload

# Columns with a meaning; any other column is kept under `extra`.
KNOWN = ("id", "path", "title", "tags", "photographer", "license", "created_at")


class PhotoMetadata(BaseModel):
    """One manifest row. Only `path` (relative to the source root) is required."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    path: str = Field(min_length=1)
    id: str | None = Field(None, min_length=1, max_length=512)
    title: str | None = Field(None, max_length=1000)
    tags: list[str] = Field(default_factory=list, max_length=200)
    photographer: str | None = Field(None, max_length=200)
    license: str | None = Field(None, max_length=200)
    created_at: datetime | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: Any) -> Any:
        # Catalog systems export numeric ids; the identity is their text.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("tags", mode="before")
    @classmethod
    def _split_tags(cls, value: Any) -> Any:
        # CSV cells hold "beach;sunset" (or "|"); JSON holds a list.
        if isinstance(value, str):
            return [t for t in value.replace("|", ";").split(";") if t.strip()]
        return value

    @field_validator("tags")
    @classmethod
    def _clean_tags(cls, value: list[str]) -> list[str]:
        return sorted({t.strip().lower() for t in value if t.strip()})

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    def payload(self) -> PhotoPayload:
        """The fields stored with the point (created_at as RFC 3339 for the datetime index)."""
        return {
            "title": self.title,
            "tags": self.tags,
            "photographer": self.photographer,
            "license": self.license,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "extra": self.extra,
        }

    def digest(self) -> str:
        """Changes when any stored field changes, so a sync rewrites the payload alone."""
        text = json.dumps(self.payload(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _row(raw: dict[str, Any]) -> PhotoMetadata:
    known = {k: v for k, v in raw.items() if k in KNOWN and v not in (None, "")}
    extra = {k: v for k, v in raw.items() if k not in KNOWN and v not in (None, "")}
    return PhotoMetadata(**known, extra=extra)


def parse_manifest(
    name: str, text: str, keep: Callable[[str], bool] | None = None, lines_without_path: bool = True
) -> tuple[dict[str, PhotoMetadata], list[str]]:
    """Rows by path, and one warning per row that was refused (its photo still indexes).

    keep: only the rows whose path it accepts are read and warned about: the others are another
    shard's. lines_without_path: warn about lines that name no path (the shard holding the
    manifest file itself does)."""
    rows: list[tuple[int, Any]] = []
    if name.endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text))
        # line_num after each row: quoted cells may span lines.
        rows = [(reader.line_num, row) for row in reader]
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as exc:
                    rows.append((number, f"not JSON: {exc.msg}"))
    by_path: dict[str, PhotoMetadata] = {}
    warnings: list[str] = []
    for number, raw in rows:
        where = f"{name} line {number}"
        raw_path = raw.get("path") if isinstance(raw, dict) else None
        if isinstance(raw_path, str) and raw_path.strip():
            if keep is not None and not keep(raw_path.strip().lstrip("/")):
                continue
        elif not lines_without_path:
            continue
        if not isinstance(raw, dict):
            warnings.append(f"{where}: {raw if isinstance(raw, str) else 'not an object'}")
            continue
        try:
            meta = _row(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            warnings.append(f"{where}: {problems}")
            continue
        path = meta.path.lstrip("/")
        if path in by_path:
            warnings.append(f"{where}: {path} is listed twice; the first row is kept")
            continue
        by_path[path] = meta
    return by_path, warnings
