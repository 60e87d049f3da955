"""Before a switch: does the new collection hold what the live one holds, key by key?

Without a full listing of the catalogue (1e8 keys, minutes of S3 listing while photos change),
the new collection is compared with the live one, which the same changes have reached:

1. the count of every shard, both collections' shard counts summed over the ranges their two
   maps share (a facet each: the store counts, nothing is read);
2. the keys and versions of every range whose counts differ by more than the changes that wait
   in the change log for it, and of `samples` ranges drawn at random (a removal and an addition
   in one range leave its count alone).

A difference is no error when the new collection is the current one: the key waits in the
change log (the live side changed it, the replay has not yet), or the new collection agrees
with the source now (the load listed a change that the live side has not synced yet), or the
new collection recorded the photo as one it cannot index at that version.

A difference the source explains is repaired, not refused: the source changed the key after
its shard was listed (its version now is not the listed one), or the key was not in the
listing (indexer/queue/listings.py), and no sync or increment said so: an event that came
late or never. The reindex replays such keys and verifies again (indexer/jobs/reindex.py).
What the source does not explain is refused, naming the photos: a photo the new collection
lost (listed, and the source still has that version), or a version the new collection holds
that neither the listing nor the live collection ever saw.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from core.jobstatus import JobStatus
from core.sources import Source
from core.vectorstore import LIVE_ALIAS, CollectionNotFound, VectorStore
from indexer.queue.listings import Listed
from indexer.queue.records import JobRecords

SHOWN = 10  # problems named in the refusal


def common_ranges(*maps: Iterable[str]) -> Callable[[str], str]:
    """The label of the coarsest partition that both shard maps refine, for any label."""
    sets = [{"", *labels} for labels in maps]
    shared = sorted(set.intersection(*sets))
    return lambda label: shared[bisect_right(shared, label) - 1]


def versions(store: VectorStore, collection: str, labels: Iterable[str]) -> dict[str, str]:
    return {
        point.key: point.content_version
        for label in labels
        for point in store.points(collection, shard=label)
        if point.key
    }


@dataclass
class Differences:
    """What a comparison found: lines the source does not explain (the job fails on them) and
    the keys it does (replayed, then compared again)."""

    problems: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)


NOT_READ = object()  # a key no replay read


def judge(
    key: str,
    held: str | None,
    was: str | None,
    current: str | None,
    listed: Listed | None,
    replayed: object = NOT_READ,
) -> str | None:
    """Why a difference the source does not explain is wrong (None: it does explain it).
    `held`, `was`: the new and the live collection's versions; `current`: the source's now;
    `listed`: the key as its shard's latest listing saw it (None: no listing covered it);
    `replayed`: the version the latest replay of the key read (None: gone), if one did."""
    in_listing = listed is not None and listed.version is not None
    was_read = replayed is not NOT_READ
    if held is not None:
        seen = (listed is not None and listed.saw(held)) or held in {was, replayed}
        if seen:
            return None
        if current is None:
            return f"{key} is extra: the source has no such photo"
        return f"{key} is stale: version {held}, the source has {current}"
    # Lost: listed (or last read) at the version the source still has.
    unchanged = replayed == current if was_read else listed is not None and listed.saw(current)
    if in_listing and current is not None and unchanged:
        return f"{key} is missing (version {current} in the source)"
    return None


def compare(
    store: VectorStore,
    source: Source,
    live: str,
    new: str,
    *,
    pending: Collection[str],
    skipped: Callable[[list[str]], Mapping[str, tuple[str, str]]],
    listed: Callable[[list[str]], Mapping[str, Listed]],
    replayed: Callable[[list[str]], Mapping[str, str | None]] = lambda keys: {},
    samples: int,
    rng: random.Random | None = None,
) -> Differences:
    """What differs between the new collection and the live one, and what of it the source
    explains (`listed`, `replayed`: what the job's listings and replays read of keys,
    indexer/queue/listings.py)."""
    rng = rng or random.Random()
    live_sizes, new_sizes = store.shard_sizes(live), store.shard_sizes(new)
    found = Differences()
    if store.count(new) != sum(new_sizes.values()):
        found.problems.append(f"{new} holds points outside every shard")
    group = common_ranges(live_sizes, new_sizes)
    members: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"live": [], "new": []})
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for label, n in live_sizes.items():
        members[group(label)]["live"].append(label)
        totals[group(label)][0] += n
    for label, n in new_sizes.items():
        members[group(label)]["new"].append(label)
        totals[group(label)][1] += n
    # A range whose counts differ by no more than the changes waiting in it may be explained
    # by them: read only if drawn. (Before the switch up to switch_lag changes wait, spread
    # over as many ranges; reading each one would cost their points.)
    waiting: dict[str, int] = defaultdict(int)
    for key in pending:
        waiting[group(key)] += 1
    differing = sorted(g for g, (a, b) in totals.items() if abs(a - b) > waiting[g])
    same = sorted(g for g in totals if g not in differing)
    checked = differing + rng.sample(same, min(samples, len(same)))
    for g in checked:
        was = versions(store, live, members[g]["live"])
        now = versions(store, new, members[g]["new"])
        odd = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
        odd = [k for k in odd if k not in pending]
        if not odd:
            continue
        bad = skipped(odd)
        records, reads = listed(odd), replayed(odd)
        for key in odd:
            stat = source.stat(key)
            current = stat.version if stat is not None else None
            held = now.get(key)
            if held == current or (held is None and key in bad and bad[key][0] == current):
                continue
            read = reads[key] if key in reads else NOT_READ
            problem = judge(key, held, was.get(key), current, records.get(key), read)
            if problem is None:
                found.explained.append(key)
            else:
                found.problems.append(problem)
    return found


def refusal(new: str, problems: list[str]) -> str:
    shown = "; ".join(problems[:SHOWN])
    more = f" and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return f"{new} does not match the live collection and the source: {shown}{more}"


def check(
    job: JobStatus, *, store: VectorStore, source: Source, records: JobRecords, samples: int
) -> Differences:
    """The new collection against the live one (indexer/jobs/verify.py, `samples` photos) and a
    sample search."""
    try:
        live = store.resolve(LIVE_ALIAS)
    except CollectionNotFound:
        return Differences()
    found = compare(
        store,
        source,
        live,
        job.collection,
        pending=records.capture.pending(job.collection),
        skipped=lambda keys: records.skips.get(job.collection, keys),
        listed=lambda keys: records.listings.lookup(job.id, keys),
        replayed=lambda keys: records.listings.replayed(job.id, keys),
        samples=samples,
    )
    sizes = store.shard_labels(job.collection)
    if sizes:
        first = next(iter(store.points(job.collection, shard=random.choice(sizes))))
        [stored] = store.retrieve(job.collection, [first.photo_id], with_vectors=True)
        assert stored.vector is not None
        hits = store.search(job.collection, stored.vector, limit=1)
        # A duplicate photo may rank first instead: the score, not the id, shows it answered.
        if not hits or hits[0].score < 0.99:
            found.problems.append(
                f"a sample search for {first.photo_id} in {job.collection} failed"
            )
    return found
