"""The plan that the runner hands to the Locust process: who sends what, how often, where."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from loadtests.scenario import Scenario

# A user's mean rate: one request per 5 s of thinking. Enough users that a slow answer holds
# back only its own user, so the offered rate stays near the plan even when latency grows.
RATE_PER_USER = 0.2
GroupName = Literal["text", "internal"]


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

    def group(self, name: GroupName) -> UserGroup:
        return self.groups[name]

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
