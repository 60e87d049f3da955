"""What the search log says about the catalogue: how much is searched, which queries find
nothing (zero results) or nothing worth a click (no-click), and how clicks fall by rank."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from core.feedback.clickmodel import events_by_search
from core.feedback.events import CLICKS, StoredEvent
from core.feedback.searchlog import SearchRecord


@dataclass(frozen=True)
class RankRate:
    """Searches that showed a result at this rank, and those of them that clicked it."""

    rank: int
    shown: int
    clicked: int

    @property
    def ctr(self) -> float:
        return self.clicked / self.shown if self.shown else 0.0


@dataclass(frozen=True)
class Analytics:
    """The window's figures; the query lists are (normalized query, searches), most first."""

    searches: int
    text_searches: int
    sessions: int
    events: dict[str, int]
    searches_with_a_click: int
    zero_result: list[tuple[str, int]]
    zero_result_searches: int
    no_click: list[tuple[str, int]]
    no_click_searches: int
    by_rank: list[RankRate]

    def to_dict(self) -> dict[str, Any]:
        figures = asdict(self)
        figures["zero_result"] = [{"query": q, "searches": n} for q, n in self.zero_result]
        figures["no_click"] = [{"query": q, "searches": n} for q, n in self.no_click]
        figures["by_rank"] = [{**asdict(r), "ctr": round(r.ctr, 4)} for r in self.by_rank]
        return figures


def analyse(
    records: Sequence[SearchRecord], events: Sequence[StoredEvent], *, top: int = 10
) -> Analytics:
    """The figures of these searches and events.

    A zero-result query is a text search whose first page showed nothing (a later page past
    the end is not one); a no-click query is a text search that showed results and got no
    `opened` or `downloaded` event. The rate by rank counts each search once per rank.
    """
    by_search = events_by_search(events)
    zero: Counter[str] = Counter()
    no_click: Counter[str] = Counter()
    shown: Counter[int] = Counter()
    clicked: Counter[int] = Counter()
    with_click = 0
    text = 0
    for record in records:
        clicks = {e.photo_id for e in by_search.get(record.search_id, []) if e.action in CLICKS}
        with_click += bool(clicks)
        for index, photo_id in enumerate(record.shown):
            rank = record.offset + index + 1
            shown[rank] += 1
            clicked[rank] += photo_id in clicks
        if record.kind != "text" or record.query is None:
            continue
        text += 1
        if not record.shown and record.offset == 0:
            zero[record.query] += 1
        elif record.shown and not clicks:
            no_click[record.query] += 1
    return Analytics(
        searches=len(records),
        text_searches=text,
        sessions=len({r.session for r in records if r.session is not None}),
        events=dict(sorted(Counter(e.action for e in events).items())),
        searches_with_a_click=with_click,
        zero_result=_top(zero, top),
        zero_result_searches=sum(zero.values()),
        no_click=_top(no_click, top),
        no_click_searches=sum(no_click.values()),
        by_rank=[RankRate(rank, shown[rank], clicked[rank]) for rank in sorted(shown)],
    )


def _top(counts: Counter[str], n: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
