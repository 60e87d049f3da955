"""Load-test scenarios: read from a TOML file (loadtests/scenarios.toml), validated."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_FILE = Path(__file__).with_name("scenarios.toml")
Kind = Literal["text", "image", "similar"]
KINDS: tuple[Kind, ...] = ("text", "image", "similar")
_TEXT_ONLY: dict[Kind, float] = {"text": 1.0}


class ScenarioError(ValueError):
    """A scenario that cannot run, with the reason in words."""


class _Strict(BaseModel):
    # A misspelt key in the file would otherwise be dropped silently and its default used.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Queries(_Strict):
    popular: int = Field(2000, ge=1, description="distinct queries that repeat")
    zipf_s: float = Field(1.0, gt=0, description="popularity of rank r ~ 1 / r**zipf_s")
    unique_share: float = Field(0.35, ge=0, le=1, description="share of one-off queries")
    seed: int = 7


class Sync(_Strict):
    # A share of the duration, so that `--duration` keeps the sync in the middle of the load.
    at: float = Field(0.4, ge=0, lt=1, description="when it starts, as a share of the duration")
    add: int = Field(0, ge=0, description="photos added to an owned folder before it")
    change: int = Field(0, ge=0, description="photos rewritten in an owned folder before it")
    delete: int = Field(0, ge=0, description="photos deleted from an owned folder before it")


class Scenario(_Strict):
    name: str
    description: str = ""
    rate: float = Field(gt=0, le=10_000, description="requests per second, all users")
    duration_s: float = Field(gt=0, le=86_400)
    cold_cache: bool = True
    mix: dict[Kind, float] = Field(default_factory=lambda: _TEXT_ONLY.copy())
    queries: Queries = Field(default_factory=Queries)
    sync: Sync | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if any(w < 0 for w in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError("mix: weights must be >= 0 with at least one above 0")
        return self

    def shares(self) -> dict[Kind, float]:
        """The mix normalized to 1, kinds with weight 0 left out."""
        total = sum(self.mix.values())
        return {kind: w / total for kind, w in self.mix.items() if w > 0}


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'scenario'}: {e['msg']}" for e in exc.errors()
    )


def load_scenarios(path: Path = DEFAULT_FILE) -> dict[str, dict[str, Any]]:
    """The raw tables of a scenario file, by name."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path} is not valid TOML: {exc}") from exc
    tables = {name: body for name, body in data.items() if isinstance(body, dict)}
    if not tables:
        raise ScenarioError(f"{path} defines no scenario ([name] tables)")
    return tables


def load_scenario(
    name: str,
    path: Path = DEFAULT_FILE,
    rate: float | None = None,
    duration_s: float | None = None,
) -> Scenario:
    """One scenario from the file, with the command line's rate and duration."""
    tables = load_scenarios(path)
    if name not in tables:
        raise ScenarioError(f"no scenario {name!r} in {path}; there are: {', '.join(tables)}")
    body = dict(tables[name], name=name)
    if rate is not None:
        body["rate"] = rate
    if duration_s is not None:
        body["duration_s"] = duration_s
    try:
        return Scenario.model_validate(body)
    except ValidationError as exc:
        raise ScenarioError(f"scenario {name!r} in {path}: {_describe(exc)}") from exc
