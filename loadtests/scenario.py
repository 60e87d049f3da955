"""Load-test scenarios (loadtests/scenarios.toml, validated), the plan the Locust process is
handed, and what the simulated users ask: queries with a popularity curve, and the kind of each
request. Plain Python with no Locust import, so that the tests can check the curve without gevent.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.vocabulary import Queries as QueryWords

DEFAULT_FILE = Path(__file__).with_name("scenarios.toml")
Kind = Literal["text", "image", "similar"]
GroupName = Literal["text", "internal"]
TEXT_ONLY: tuple[Kind, ...] = ("text",)
# A user's mean rate: one request per 5 s of thinking. Enough users that a slow answer holds
# back only its own user, so the offered rate stays near the plan even when latency grows.
RATE_PER_USER = 0.2


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
    mix: dict[Kind, float] = Field(default_factory=lambda: dict.fromkeys(TEXT_ONLY, 1.0))
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
    name: str, path: Path = DEFAULT_FILE, rate: float | None = None, duration_s: float | None = None
) -> Scenario:
    """One scenario from the file, with the command line's rate and duration."""
    tables = load_scenarios(path)
    if name not in tables:
        raise ScenarioError(f"no scenario {name!r} in {path}; there are: {', '.join(tables)}")
    given = {"rate": rate, "duration_s": duration_s}
    body = tables[name] | {"name": name} | {k: v for k, v in given.items() if v is not None}
    try:
        return Scenario.model_validate(body)
    except ValidationError as exc:
        reasons = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'scenario'}: {e['msg']}" for e in exc.errors()
        )
        raise ScenarioError(f"scenario {name!r} in {path}: {reasons}") from exc


# -- the plan the runner hands to the Locust process: who sends what, how often, where ---------


class UserGroup(BaseModel):
    model_config = ConfigDict(frozen=True)

    users: int = Field(ge=0)
    rate_per_user: float = Field(gt=0)
    keyed: bool  # sends the plan's API key


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    scenario: Scenario
    salt: int  # varies the one-off queries between runs
    records: str  # the CSV every request is written to
    started: str  # where the Locust process writes the time its load starts
    images: list[str]  # files the internal apps upload
    photo_ids: list[str]  # photos the internal apps ask "more like this" for
    api_key: str | None = None  # the internal apps' key; None: they search anonymously
    limit: int = 20  # results per search, as the page asks
    groups: dict[GroupName, UserGroup]

    @property
    def users(self) -> int:
        return sum(g.users for g in self.groups.values())


def user_groups(scenario: Scenario) -> dict[GroupName, UserGroup]:
    """Site visitors for the text share, internal apps for the image and similar shares."""
    shares = scenario.shares()
    rates: dict[GroupName, float] = {
        "text": scenario.rate * shares.get("text", 0.0),
        "internal": scenario.rate * (shares.get("image", 0.0) + shares.get("similar", 0.0)),
    }
    groups = {}
    for name, rate in rates.items():
        users = math.ceil(rate / RATE_PER_USER - 1e-9) if rate > 0 else 0
        groups[name] = UserGroup(
            users=users, rate_per_user=rate / users if users else 1.0, keyed=name == "internal"
        )
    return groups


# -- what people type: a popularity curve of queries, and the kind of each request -------------


class QueryMix:
    """Draws search texts: a Zipf-ranked head of popular queries, and one-off queries.

    The unique tail comes from the same generator as the head, after it, so a one-off query
    can never be a popular one (nor an earlier one-off): only the head can hit the cache.
    `salt` varies the tail between runs; the head stays the same, as real popular queries do.
    """

    def __init__(self, spec: Queries, salt: int = 0) -> None:
        words = QueryWords(spec.seed)
        self.popular = words.take(spec.popular)
        self._tail = words
        self._tail_tag = salt
        self._cumulative = _zipf_cumulative(spec)
        self.unique_share = spec.unique_share
        self._rng = random.Random(spec.seed * 1_000_003 + salt)

    def next(self) -> tuple[str, bool]:
        """(text, whether it is a one-off)."""
        if self._rng.random() < self.unique_share:
            # The salt keeps this run's one-offs apart from an earlier run's (its cache).
            return f"{self._tail.next()} {self._tail_tag:x}", True
        return self.popular[_draw_rank(self._rng, self._cumulative)], False


class KindMix:
    """Which kind of request comes next, by the scenario's shares."""

    def __init__(self, shares: dict[Kind, float], seed: int) -> None:
        self.kinds: list[Kind] = list(shares)
        self._cumulative = list(itertools.accumulate(shares[k] for k in self.kinds))
        self._rng = random.Random(seed)

    def next(self) -> Kind:
        return self.kinds[_draw_rank(self._rng, self._cumulative)]


def expected_hit_ratio(spec: Queries, searches: int, seed: int = 0) -> float:
    """The share of `searches` draws that repeat an earlier text in the run: the cache hit
    ratio that a cold cache reaches at best (one-offs never repeat, so only ranks matter)."""
    rng = random.Random(seed)
    cumulative = _zipf_cumulative(spec)
    seen: set[int] = set()
    hits = 0
    for _ in range(searches):
        if rng.random() < spec.unique_share:
            continue
        rank = _draw_rank(rng, cumulative)
        hits += rank in seen
        seen.add(rank)
    return hits / searches if searches else 0.0


def _zipf_cumulative(spec: Queries) -> list[float]:
    return list(itertools.accumulate(1.0 / r**spec.zipf_s for r in range(1, spec.popular + 1)))


def _draw_rank(rng: random.Random, cumulative: list[float]) -> int:
    x = rng.random() * cumulative[-1]
    return min(bisect.bisect_right(cumulative, x), len(cumulative) - 1)
