"""core/experiments.py: one experiment runs at a time, clicks are credited once per search and
photo to the impression's outcome, the sign test equals a hand count, and a decision sticks."""

from __future__ import annotations

import math
import uuid

import pytest
from redis import Redis

from core.experiments import (
    DECISIONS,
    Decision,
    Experiment,
    ExperimentError,
    auto_decision,
    credit,
    current,
    decision_for,
    end,
    running,
    sign_test,
    start,
    switch_refusal,
    verdict,
)


def _prefix() -> str:
    return f"unit-{uuid.uuid4().hex}"


def test_an_experiment_starts_alone_and_names_its_candidate(redis: Redis) -> None:
    prefix = _prefix()
    assert current(redis, prefix) is None
    assert decision_for(redis, prefix, "photos-m2-abc") is None
    started = start(
        redis, prefix, live="photos-m1-x", candidate="photos-m2-abc", share=0.25, now=lambda: 7.0
    )
    assert (started.live, started.candidate, started.share) == (
        "photos-m1-x",
        "photos-m2-abc",
        0.25,
    )
    assert (started.state, started.started_at, started.impressions) == ("running", 7.0, 0)
    assert running(redis, prefix) == started
    assert decision_for(redis, prefix, "photos-m2-abc") == "running"
    assert decision_for(redis, prefix, "photos-m2-other") is None
    with pytest.raises(ExperimentError, match=f"experiment {started.id} .* is running"):
        start(redis, prefix, live="photos-m1-x", candidate="photos-m2-def", share=0.1)


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_share_outside_zero_to_one_is_refused(redis: Redis, share: float) -> None:
    with pytest.raises(ExperimentError, match="share must be above 0"):
        start(redis, _prefix(), live="photos-m1-x", candidate="photos-m2-y", share=share)


def test_the_live_collection_cannot_be_its_own_candidate(redis: Redis) -> None:
    with pytest.raises(ExperimentError, match="is the live collection"):
        start(redis, _prefix(), live="photos-m1-x", candidate="photos-m1-x", share=0.1)


@pytest.mark.parametrize("decision", DECISIONS)
def test_an_admin_ends_it_with_a_decision_that_sticks(redis: Redis, decision: Decision) -> None:
    prefix = _prefix()
    started = start(redis, prefix, live="photos-m1-x", candidate="photos-m2-y", share=0.1)
    ended = end(redis, prefix, started.id, decision, by="admin", now=lambda: 9.0)
    assert (ended.state, ended.ended_at, ended.ended_by) == (decision, 9.0, "admin")
    assert decision_for(redis, prefix, "photos-m2-y") == decision
    assert running(redis, prefix) is None
    assert end(redis, prefix, started.id, decision, by="admin").state == decision  # idempotent
    other: Decision = "drop" if decision == "switch" else "switch"
    with pytest.raises(ExperimentError, match=f"ended already, with {decision}"):
        end(redis, prefix, started.id, other, by="admin")
    # A new experiment may start once it ended; the old candidate keeps its decision.
    start(redis, prefix, live="photos-m1-x", candidate="photos-m2-z", share=0.1)
    assert decision_for(redis, prefix, "photos-m2-y") == decision
    with pytest.raises(ExperimentError, match="no experiment nope"):
        end(redis, prefix, "nope", "drop", by="admin")


def test_clicks_are_credited_once_to_the_outcome_of_their_search(redis: Redis) -> None:
    prefix = _prefix()
    exp = start(redis, prefix, live="photos-m1-x", candidate="photos-m2-y", share=0.1).id
    assert credit(redis, prefix, exp, "s1", "a", "candidate")  # s1: a win
    assert not credit(redis, prefix, exp, "s1", "a", "candidate")  # a duplicate event
    assert credit(redis, prefix, exp, "s2", "b", "live")  # s2: a loss
    assert credit(redis, prefix, exp, "s3", "c", "candidate")
    assert credit(redis, prefix, exp, "s3", "d", "live")  # s3: one each, a tie
    assert credit(redis, prefix, exp, "s4", "e", "live")
    assert credit(redis, prefix, exp, "s4", "f", "candidate")
    assert credit(redis, prefix, exp, "s4", "g", "candidate")  # s4: 2 to 1, a win
    found = running(redis, prefix)
    assert found is not None
    assert (found.impressions, found.wins, found.losses, found.ties) == (4, 2, 1, 1)
    end(redis, prefix, exp, "drop", by="admin")
    assert not credit(redis, prefix, exp, "s5", "h", "candidate")  # ended: nothing counts
    assert current(redis, prefix) == Experiment(**{**found.__dict__, **_ended(redis, prefix)})


def _ended(redis: Redis, prefix: str) -> dict[str, object]:
    ended = current(redis, prefix)
    assert ended is not None
    return {"state": ended.state, "ended_at": ended.ended_at, "ended_by": ended.ended_by}


def test_the_sign_test_equals_a_hand_computed_binomial_tail() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(3, 3) == 1.0
    # 9 wins, 1 loss: P(X <= 1) = 11 / 1024 on each side.
    assert sign_test(9, 1) == pytest.approx(2 * 11 / 1024)
    assert sign_test(1, 9) == sign_test(9, 1)
    assert sign_test(20, 0) == pytest.approx(2 / 2**20)
    assert sign_test(7, 3) == pytest.approx(2 * sum(math.comb(10, k) for k in range(4)) / 1024)


def _with(wins: int, losses: int, ties: int = 0) -> Experiment:
    return Experiment(
        id="e",
        live="photos-m1-x",
        candidate="photos-m2-y",
        share=0.1,
        state="running",
        started_at=0.0,
        impressions=wins + losses + ties,
        wins=wins,
        losses=losses,
        ties=ties,
    )


def test_it_switches_itself_only_on_a_significant_win_past_the_minimum() -> None:
    assert verdict(_with(20, 2), 0.05) == "candidate"
    assert verdict(_with(2, 20), 0.05) == "live"
    assert verdict(_with(6, 4), 0.05) is None
    assert auto_decision(_with(20, 2), alpha=0.05, min_impressions=20) == "switch"
    assert auto_decision(_with(20, 2), alpha=0.05, min_impressions=100) is None
    assert auto_decision(_with(2, 20), alpha=0.05, min_impressions=20) is None
    assert auto_decision(_with(6, 4, ties=30), alpha=0.05, min_impressions=20) is None


def test_switching_needs_force_only_when_the_live_side_wins_significantly() -> None:
    refusal = switch_refusal(_with(2, 20), 0.05)
    assert refusal is not None and "live collection wins significantly (20 to 2" in refusal
    assert switch_refusal(_with(20, 2), 0.05) is None
    assert switch_refusal(_with(5, 6), 0.05) is None
