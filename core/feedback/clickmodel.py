"""Clicks to graded judgements: what searchers opened and downloaded, read as relevance.

The model, per query (its normalized text), over every text search of it in the window:

1. Examination (the cascade assumption): a searcher reads a page from the top down to the
   last result they clicked, so each result shown at or above a search's last click was
   examined; a result a caller reported `skipped` was examined too. A search without a click
   examined nothing we can tell (the searcher may have read none of it).
2. A click is an `opened` or `downloaded` event; a result examined and not clicked is skipped.
   A search counts once per result, however many events it sent for it.
3. Position bias: a click-through rate over examinations, not over impressions. A result
   shown low is seldom clicked because it is seldom read; counted only where it was read, its
   rate is comparable with the first result's (the examination hypothesis).
4. Grades, per photo: 2 (highly relevant) when it was downloaded from the query's results, or
   its rate is at least HIGH_CTR; 1 (relevant) when it was clicked and its rate is at least
   MIN_CTR; no judgement otherwise (skipped often, or too seldom clicked to say): an unjudged
   photo counts as not relevant in nDCG anyway, and "never clicked" is weaker evidence than a
   curated 0.
5. Only queries searched in at least `min_sessions` distinct sessions (X-Session-Id) are
   written: one searcher's habits are not the catalogue's relevance.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from core.feedback.events import CLICKS, StoredEvent
from core.feedback.searchlog import SearchRecord
from core.quality.judgements import JudgementSet, Query

HIGH_CTR = 0.5
MIN_CTR = 0.1
TAG = "clicks"


@dataclass
class PhotoCounts:
    """One photo's record under one query: searches that examined, clicked, downloaded it."""

    examined: int = 0
    clicked: int = 0
    downloaded: int = 0

    @property
    def ctr(self) -> float:
        return self.clicked / self.examined if self.examined else 0.0

    def grade(self) -> int | None:
        if self.downloaded or (self.clicked and self.ctr >= HIGH_CTR):
            return 2
        if self.clicked and self.ctr >= MIN_CTR:
            return 1
        return None


@dataclass
class QueryCounts:
    """One query's searches, distinct sessions, and its photos' counts."""

    searches: int = 0
    sessions: set[str] = field(default_factory=set)
    photos: dict[str, PhotoCounts] = field(default_factory=lambda: defaultdict(PhotoCounts))


def events_by_search(events: Iterable[StoredEvent]) -> dict[str, list[StoredEvent]]:
    grouped: dict[str, list[StoredEvent]] = defaultdict(list)
    for event in events:
        grouped[event.search_id].append(event)
    return grouped


def count(records: Iterable[SearchRecord], events: Iterable[StoredEvent]) -> dict[str, QueryCounts]:
    """Steps 1-3 of the model: each text query's counts."""
    by_search = events_by_search(events)
    queries: dict[str, QueryCounts] = defaultdict(QueryCounts)
    for record in records:
        if record.kind != "text" or not record.query:
            continue
        counts = queries[record.query]
        counts.searches += 1
        if record.session is not None:
            counts.sessions.add(record.session)
        its = by_search.get(record.search_id, [])
        clicked = {e.photo_id for e in its if e.action in CLICKS}
        downloaded = {e.photo_id for e in its if e.action == "downloaded"}
        last = max((i for i, p in enumerate(record.shown) if p in clicked), default=-1)
        examined = set(record.shown[: last + 1]) | {
            e.photo_id for e in its if e.action == "skipped"
        }
        for photo_id in examined & set(record.shown):
            photo = counts.photos[photo_id]
            photo.examined += 1
            photo.clicked += photo_id in clicked
            photo.downloaded += photo_id in downloaded
    return queries


def query_id(text: str) -> str:
    """A query's id in the set: the same text, the same id, from one run to the next."""
    return "click-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def judgements(
    records: Sequence[SearchRecord],
    events: Sequence[StoredEvent],
    *,
    min_sessions: int = 3,
    name: str = "clicks",
) -> JudgementSet:
    """The judgement set the model makes of a search log: steps 4 and 5."""
    queries: list[Query] = []
    qrels: dict[str, dict[str, int]] = {}
    counted = count(records, events)
    for text in sorted(counted, key=lambda t: (-len(counted[t].sessions), t)):
        counts = counted[text]
        if len(counts.sessions) < min_sessions:
            continue
        graded = {
            photo_id: grade
            for photo_id, photo in sorted(counts.photos.items())
            # A TREC line is split on whitespace: an id holding a space cannot be written.
            if (grade := photo.grade()) is not None and not any(c.isspace() for c in photo_id)
        }
        if graded:
            qid = query_id(text)
            queries.append(Query(qid, text, (TAG,)))
            qrels[qid] = graded
    return JudgementSet(name, tuple(queries), qrels)
