"""What the experiment's admin routes accept and answer (a key with the admin scope)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from core.experiments import Experiment, verdict

_STATUS_EXAMPLE: dict[str, Any] = {
    "id": "9b1f0c2d3e4a",
    "live": "photos-m1-1a2b3c4d5e6f",
    "candidate": "photos-m2-3f9c2a1b7d4e",
    "share": 0.05,
    "state": "running",
    "started_at": 1717200000.0,
    "ended_at": 0.0,
    "ended_by": "",
    "reason": "",
    "impressions": 412,
    "wins": 171,
    "losses": 122,
    "ties": 119,
    "p_value": 0.0050,
    "alpha": 0.05,
    "significant": True,
    "winner": "candidate",
}


class ExperimentRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"candidate": "photos-m2-3f9c2a1b7d4e", "share": 0.05}]},
    )

    candidate: str = Field(
        min_length=1,
        max_length=255,
        description="The collection to compare with the live one (a reindex's, which its "
        "change capture keeps current until the switch).",
    )
    share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="The share of text searches interleaved; unset: "
        "PHOTOSEARCH_API__EXPERIMENT_SHARE.",
    )


class EndRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"decision": "switch"}]}
    )

    decision: Literal["switch", "drop"] = Field(
        description="switch: the reindex waiting on the experiment switches (its quality gate "
        "still applies); drop: it is cancelled and its collection left to drop."
    )
    force: StrictBool = Field(
        False, description="Switch even though the live collection wins significantly."
    )


class ExperimentStatus(BaseModel):
    """An experiment, its counts and its sign test."""

    model_config = ConfigDict(json_schema_extra={"examples": [_STATUS_EXAMPLE]})

    id: str
    live: str = Field(description="The live collection when it started.")
    candidate: str
    share: float
    state: Literal["running", "switch", "drop"]
    started_at: float
    ended_at: float
    ended_by: str = Field(description="admin, or auto (it switched itself); empty: running.")
    reason: str
    impressions: int = Field(description="Interleaved searches with a credited click.")
    wins: int = Field(description="Impressions whose candidate results took more clicks.")
    losses: int = Field(description="Impressions whose live results took more clicks.")
    ties: int
    p_value: float = Field(description="Two-sided sign test of wins against losses.")
    alpha: float = Field(description="The significance level (PHOTOSEARCH_API__EXPERIMENT_ALPHA).")
    significant: bool
    winner: Literal["live", "candidate"] | None = Field(
        description="The side that wins significantly at alpha, if either does."
    )

    @classmethod
    def of(cls, experiment: Experiment, alpha: float) -> ExperimentStatus:
        winner = verdict(experiment, alpha)
        return cls(
            **experiment.to_dict(), alpha=alpha, significant=winner is not None, winner=winner
        )
