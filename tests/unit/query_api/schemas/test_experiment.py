"""query_api/schemas/experiment.py: its examples are valid, and an experiment's status carries
the sign test's verdict at the configured alpha."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from core.experiments import Experiment
from query_api.schemas.experiment import EndRequest, ExperimentRequest, ExperimentStatus


@pytest.mark.parametrize("model", [ExperimentRequest, EndRequest, ExperimentStatus])
def test_every_example_is_valid(model: type[BaseModel]) -> None:
    examples = model.model_json_schema()["examples"]
    assert examples
    for example in examples:
        model.model_validate(example)


def _experiment(wins: int, losses: int) -> Experiment:
    return Experiment(
        id="e",
        live="photos-m1-a",
        candidate="photos-m2-b",
        share=0.05,
        state="running",
        started_at=1.0,
        impressions=wins + losses,
        wins=wins,
        losses=losses,
    )


def test_the_status_says_which_side_wins_at_alpha() -> None:
    won = ExperimentStatus.of(_experiment(10, 0), alpha=0.05)
    assert won.p_value == pytest.approx(2 / 1024)
    assert (won.significant, won.winner) == (True, "candidate")
    strict = ExperimentStatus.of(_experiment(10, 0), alpha=0.001)
    assert (strict.significant, strict.winner, strict.alpha) == (False, None, 0.001)
    lost = ExperimentStatus.of(_experiment(0, 10), alpha=0.05)
    assert lost.winner == "live"


def test_a_decision_is_switch_or_drop_and_force_is_a_boolean() -> None:
    with pytest.raises(ValidationError, match="decision"):
        EndRequest.model_validate({"decision": "maybe"})
    with pytest.raises(ValidationError, match="force"):
        EndRequest.model_validate({"decision": "drop", "force": "yes"})
