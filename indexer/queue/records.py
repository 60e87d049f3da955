"""A job's records in Redis that planning writes: counts, skips, logged changes, its round."""

from __future__ import annotations

from dataclasses import dataclass

from core.feedback.popularity import Popularity
from core.jobs import Jobs
from indexer.photo.skips import SkipRecords
from indexer.queue.capture import ChangeLog
from indexer.queue.listings import Listings
from indexer.queue.workqueue import WorkQueue


@dataclass(frozen=True)
class JobRecords:
    """The job's counts and problems (`jobs`), the photos it skips (`skips`), the keys a sync
    changes for a reindex that follows the live side (`capture`), its round's units and
    batches (`work`), and what a reindex's listings saw (`listings`): all in one Redis, under
    one prefix."""

    jobs: Jobs
    skips: SkipRecords
    capture: ChangeLog
    work: WorkQueue
    listings: Listings
    # Each photo's popularity, joined into its metadata (indexer/plan/popularity.py); None: none.
    popularity: Popularity | None = None
