"""Team-draft interleaving of the live and the candidate rankings (Radlinski, Kurup and
Joachims, CIKM 2008), and the credit of a search's clicks to the side that showed each result."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

from core.experiments import Side

Outcome = Literal["win", "loss", "tie"]
SIDES: tuple[Side, Side] = ("live", "candidate")


def assigned(experiment_id: str, key: str, share: float) -> bool:
    """Whether the searcher `key` (a session id, else the search's id) is in the share: a
    hash, so that a session stays in or out for the whole experiment."""
    digest = hashlib.sha256(f"{experiment_id}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def team_draft(
    live: Sequence[str], candidate: Sequence[str], *, limit: int, seed: str
) -> list[tuple[str, Side]]:
    """Up to `limit` results, each with the side that picked it.

    The team with fewer picks picks next, its highest-ranked result not chosen yet; at equal
    picks a coin decides (seeded by `seed`, so one search always gives the same page). A team
    whose ranking has run out leaves the picks to the other.
    """
    coin = random.Random(seed)
    rankings = {"live": live, "candidate": candidate}
    at = dict.fromkeys(SIDES, 0)
    picks = dict.fromkeys(SIDES, 0)
    chosen: set[str] = set()
    page: list[tuple[str, Side]] = []

    def next_of(side: Side) -> str | None:
        ranking = rankings[side]
        while at[side] < len(ranking) and ranking[at[side]] in chosen:
            at[side] += 1
        return ranking[at[side]] if at[side] < len(ranking) else None

    while len(page) < limit:
        offers = {side: found for side in SIDES if (found := next_of(side)) is not None}
        if not offers:
            break
        if len(offers) == 1:
            (side,) = offers
        elif picks["live"] != picks["candidate"]:
            side = min(SIDES, key=lambda s: picks[s])
        else:
            side = SIDES[coin.randrange(2)]
        photo = offers[side]
        chosen.add(photo)
        picks[side] += 1
        page.append((photo, side))
    return page


def clicked_sides(
    shown: Sequence[str], sides: Sequence[Side], clicked: Iterable[str]
) -> list[tuple[str, Side]]:
    """Each clicked photo the page showed, once, with the side that contributed it."""
    by_photo = dict(zip(shown, sides, strict=True))
    return [(photo, by_photo[photo]) for photo in dict.fromkeys(clicked) if photo in by_photo]


def outcome(credited: Iterable[Side]) -> Outcome | None:
    """A search's outcome for the candidate: more clicks on its results than on the live
    side's is a win, fewer a loss, as many a tie; a search without a click counts not at all."""
    counts = Counter(credited)
    if not counts:
        return None
    if counts["candidate"] > counts["live"]:
        return "win"
    return "loss" if counts["live"] > counts["candidate"] else "tie"
