"""A replica's in-memory index of suggestions: popular queries and the collection's vocabulary
in sorted lists, a prefix's best completions found by bisection in microseconds."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from core.feedback.suggestlog import PopularQuery
from core.querycache import normalize_query
from core.terms import fold

Source = Literal["query", "tag", "title"]
MAX_LIMIT = 20
# Candidates read per prefix: room for the duplicates and the typed text itself, which are
# left out, beside the largest limit.
BEST = 2 * MAX_LIMIT + 1
# Above the last character: every key that starts with a prefix sorts below prefix + this.
_PAST = "\U0010ffff"


class PrefixIndex:
    """Keys given best first (a key's position is its rank); `best(prefix, k)` ranks the keys
    that start with the prefix. A prefix of at most SCAN keys has its few ranks sorted on
    the spot; the best of each longer one were sorted once, when the index was built, so a
    one-letter prefix of 100,000 keys costs what a rare one does."""

    SCAN = 128

    def __init__(self, keys: Sequence[str], best: int = BEST) -> None:
        order = sorted(range(len(keys)), key=keys.__getitem__)
        self.keys = [keys[i] for i in order]
        self.ranks = order
        self.best_of: dict[str, list[int]] = {}
        self._keep = best
        self._walk(0, len(self.keys), 0)

    def _walk(self, lo: int, hi: int, depth: int) -> None:
        """Keep the best ranks of every prefix longer than `depth` under keys[lo:hi] (which
        share their first `depth` characters) that more than SCAN keys start with."""
        keys = self.keys
        i = lo
        while i < hi and len(keys[i]) == depth:
            i += 1  # the shared prefix itself sorts first
        while i < hi:
            prefix = keys[i][: depth + 1]
            j = bisect_left(keys, prefix + _PAST, i, hi)
            if j - i > self.SCAN:
                self.best_of[prefix] = sorted(self.ranks[i:j])[: self._keep]
                self._walk(i, j, depth + 1)
            i = j

    def __len__(self) -> int:
        return len(self.keys)

    def best(self, prefix: str, k: int) -> list[int]:
        """The ranks of the best k keys that start with `prefix`, best first."""
        lo = bisect_left(self.keys, prefix)
        hi = bisect_left(self.keys, prefix + _PAST, lo)
        if hi - lo > self.SCAN:
            return self.best_of[prefix][:k]
        return sorted(self.ranks[lo:hi])[:k]


@dataclass(frozen=True)
class Suggestion:
    text: str
    source: Source


@dataclass(frozen=True)
class _Entry:
    text: str
    source: Source
    weight: int  # a query's sessions; a tag's or word's photos
    key: str  # the text folded: what is compared


@dataclass(frozen=True)
class Vocabulary:
    """What the live collection holds: each tag and each word of titles and tags, with the
    number of photos that hold it, most first."""

    tags: Sequence[tuple[str, int]] = ()
    terms: Sequence[tuple[str, int]] = ()


class SuggestIndex:
    """Completions of a typed query: the popular queries it starts (most sessions first),
    then the tags it starts and the words its last word starts (most photos first)."""

    def __init__(self, queries: Sequence[PopularQuery] = (), vocabulary: Vocabulary = Vocabulary()):
        whole: dict[str, _Entry] = {}
        for query in queries:
            key = fold(query.text)
            whole.setdefault(key, _Entry(query.text, "query", query.sessions, key))
        tags: dict[str, _Entry] = {}
        for tag, photos in vocabulary.tags:
            text = normalize_query(tag)
            key = fold(text)
            if key:
                # Tags that differ only in case or accents are one tag: their photos add up.
                known = tags.get(key)
                weight = photos + (known.weight if known else 0)
                tags[key] = _Entry(known.text if known else text, "tag", weight, key)
        for key, entry in sorted(tags.items(), key=lambda item: -item[1].weight):
            whole.setdefault(key, entry)
        self.whole = list(whole.values())
        self.queries = sum(1 for e in self.whole if e.source == "query")
        self._whole = PrefixIndex(list(whole))
        words: dict[str, _Entry] = {}
        for term, photos in vocabulary.terms:
            key = fold(term)
            if key and " " not in key and key not in words:
                source: Source = "tag" if key in tags else "title"
                words[key] = _Entry(key, source, photos, key)
        self.words = sorted(words.values(), key=lambda e: -e.weight)
        self._words = PrefixIndex([e.text for e in self.words])

    def __len__(self) -> int:
        return len(self.whole) + len(self.words)

    def complete(self, q: str, limit: int) -> list[Suggestion]:
        """At most `limit` completions of `q` (normalized as a search's query is), never `q`
        itself, each text once."""
        text = normalize_query(q)
        key = fold(text)
        if not key:
            return []
        matched = [self.whole[i] for i in self._whole.best(key, BEST)]
        head, _, last = text.rpartition(" ")
        lead, folded_lead = (f"{head} ", f"{fold(head)} ") if head else ("", "")
        completed = [
            _Entry(lead + e.text, e.source, e.weight, folded_lead + e.key)
            for e in (self.words[i] for i in self._words.best(fold(last), BEST))
        ]
        queries = [e for e in matched if e.source == "query"]
        # Vocabulary by its photos: a tag that the whole text starts and a word its last word
        # starts compete on the same count.
        vocabulary = sorted(
            (e for e in (*matched, *completed) if e.source != "query"), key=lambda e: -e.weight
        )
        seen = {key}
        found: list[Suggestion] = []
        for entry in (*queries, *vocabulary):
            if entry.key in seen:
                continue
            seen.add(entry.key)
            found.append(Suggestion(entry.text, entry.source))
            if len(found) == limit:
                break
        return found
