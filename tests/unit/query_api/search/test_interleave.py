"""query_api/search/interleave.py on hand-made rankings: team-draft takes turns, each team its best
result not chosen yet; clicks are credited to the side that showed the result."""

from __future__ import annotations

import pytest

from core.experiments import Side
from query_api.search.interleave import assigned, clicked_sides, outcome, team_draft


def test_each_team_picks_its_best_not_chosen_yet_and_the_teams_stay_even() -> None:
    live = ["a", "b", "c", "d", "e"]
    candidate = ["b", "a", "f", "c", "g"]
    for seed in map(str, range(50)):
        page = team_draft(live, candidate, limit=6, seed=seed)
        photos = [photo for photo, _ in page]
        assert len(photos) == len(set(photos)) == 6
        for n in range(1, len(page) + 1):  # after every pick the teams differ by one at most
            live_picks = sum(side == "live" for _, side in page[:n])
            assert abs(live_picks - (n - live_picks)) <= 1
        # The first pick is a team's own top result: "a" for live, "b" for the candidate.
        assert page[0] in (("a", "live"), ("b", "candidate"))
        # Every pick is the highest of its team's ranking not chosen before it.
        for n, (photo, side) in enumerate(page):
            ranking = live if side == "live" else candidate
            before = {p for p, _ in page[:n]}
            assert photo == next(p for p in ranking if p not in before)


def test_a_hand_drawn_draft() -> None:
    # Round 1: live takes a, the candidate b (whichever the coin lets first); round 2: live
    # takes c (b is chosen), the candidate f (a is chosen).
    page = team_draft(["a", "b", "c", "d"], ["b", "a", "f", "c"], limit=4, seed="s")
    first_round = {side for _, side in page[:2]}
    assert first_round == {"live", "candidate"}
    assert dict(page[:2]) == {"a": "live", "b": "candidate"}
    assert dict(page[2:]) == {"c": "live", "f": "candidate"}


def test_the_same_seed_gives_the_same_page_and_coins_vary_by_seed() -> None:
    live, candidate = list("abcdefgh"), list("hgfedcba")
    pages = {tuple(team_draft(live, candidate, limit=8, seed=str(s))) for s in range(40)}
    assert team_draft(live, candidate, limit=8, seed="x") == team_draft(
        live, candidate, limit=8, seed="x"
    )
    assert len(pages) > 1
    firsts = {page[0][1] for page in pages}
    assert firsts == {"live", "candidate"}


def test_a_short_ranking_leaves_the_rest_of_the_page_to_the_other() -> None:
    page = team_draft(["a"], ["b", "c", "d"], limit=10, seed="s")
    assert sorted(page) == [
        ("a", "live"),
        ("b", "candidate"),
        ("c", "candidate"),
        ("d", "candidate"),
    ]
    assert team_draft([], [], limit=5, seed="s") == []
    # Identical rankings: still one photo each, never twice.
    same = team_draft(list("abc"), list("abc"), limit=3, seed="s")
    assert [photo for photo, _ in same] == ["a", "b", "c"]


SHOWN = ["a", "b", "c", "d"]
SIDES: list[Side] = ["live", "candidate", "candidate", "live"]


@pytest.mark.parametrize(
    ("clicks", "credited", "expected"),
    [
        ([], [], None),
        (["b"], [("b", "candidate")], "win"),
        (["a"], [("a", "live")], "loss"),
        (["a", "b"], [("a", "live"), ("b", "candidate")], "tie"),
        (["b", "c", "d"], [("b", "candidate"), ("c", "candidate"), ("d", "live")], "win"),
        (["b", "b", "x"], [("b", "candidate")], "win"),  # a repeat and a photo not shown
    ],
)
def test_clicks_are_credited_to_the_side_that_showed_them(
    clicks: list[str], credited: list[tuple[str, Side]], expected: str | None
) -> None:
    assert clicked_sides(SHOWN, SIDES, clicks) == credited
    assert outcome(side for _, side in credited) == expected


def test_assignment_is_a_stable_share_of_searchers() -> None:
    keys = [f"session-{n}" for n in range(4000)]
    inside = [key for key in keys if assigned("exp1", key, 0.05)]
    assert 120 < len(inside) < 280  # 5% of 4000 = 200, well within chance
    assert inside == [key for key in keys if assigned("exp1", key, 0.05)]
    assert all(assigned("exp1", key, 1.0) for key in keys)
    # Another experiment draws another share.
    assert inside != [key for key in keys if assigned("exp2", key, 0.05)]
