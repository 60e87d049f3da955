"""A reindex on a live catalogue: photos are added, overwritten, deleted and retitled by nightly
increments all through its load and catch-up, and it still switches; then a rollback is current.

The test owns the Qdrant Edge store and runs the worker on its threads (tests/system/
test_reindex.py says why); every task travels through the real Redis queue to the real Triton.
The source counts its listings: catch-up replays the logged changes, it lists nothing but the
folder of a changed manifest.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

from core.experiments import end, start
from core.jobs import Jobs
from core.jobstatus import JobKind, JobPhase, JobState
from core.sources import LocalSource, SourceObject, check_source
from core.submit import queue_sync, submit_reindex, submit_rollback, submit_sync
from core.taskqueue import all_queues, control_queue, plan_queue
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, VectorStore, model_version_of, open_store
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.triton_server import TritonServer
from tests.support.indexing import (
    drop_keys,
    photo_folder,
    settings_for,
    tasks,
    wait_idle,
    wait_job,
    write_photo,
)
from tests.support.waiting import wait_until


class CountingSource(LocalSource):
    """A folder that records the range of every listing once told to."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.counting = False
        self.listed: list[tuple[str, str | None]] = []

    def list_range(self, lo: str = "", hi: str | None = None) -> Iterator[SourceObject]:
        if self.counting:
            self.listed.append((lo, hi))
        return super().list_range(lo, hi)


def held(store: VectorStore, collection: str) -> dict[str, str]:
    """Key -> content version of every photo the collection holds."""
    return {p.key: p.content_version for p in store.points(collection)}


def in_source(root: Path) -> dict[str, str]:
    return {o.key: o.version for o in LocalSource(root).list_range() if "photos." not in o.key}


def titles(store: VectorStore, collection: str, keys: list[str]) -> dict[str, str]:
    return {p.photo_id: str(p.payload["title"]) for p in store.retrieve(collection, keys)}


class Changer(threading.Thread):
    """The nightly side, as fast as it goes: each cycle adds a photo, overwrites one, deletes
    one and retitles one (a manifest), journals the keys and runs an increment, until the
    reindex takes the live lock for its switch."""

    def __init__(
        self, root: Path, keys: list[str], journal: Path, jobs: Jobs, app: object, reindex: str
    ) -> None:
        super().__init__(daemon=True)
        self.root, self.journal, self.jobs, self.app, self.reindex = (
            root,
            journal,
            jobs,
            app,
            reindex,
        )
        self.day1 = sorted(k for k in keys if k.startswith("day1/"))
        self.day2 = sorted(k for k in keys if k.startswith("day2/"))
        self.phases: list[str] = []
        self.increments: list[str] = []
        self.error: BaseException | None = None

    def cycle(self, i: int) -> list[str]:
        added = f"new/p{i:02d}.jpg"
        write_photo(self.root / added, 100 + i)
        overwritten = self.day1[i % len(self.day1)]
        write_photo(self.root / overwritten, 200 + i)
        deleted = self.day2[i % len(self.day2)]
        (self.root / deleted).unlink(missing_ok=True)
        rows = [{"path": "m0.jpg", "title": f"retitled {i}"}, {"path": "m1.jpg", "title": "same"}]
        (self.root / "a-meta" / "photos.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
        return [added, overwritten, deleted, "a-meta/photos.jsonl"]

    def run(self) -> None:
        try:
            for i in range(40):  # a ceiling: the switch ends it long before
                job = self.jobs.get(self.reindex)
                assert job is not None
                if job.state != JobState.RUNNING and job.state != JobState.FINALIZING:
                    return
                if job.phase == JobPhase.SWITCH:
                    return
                self.phases.append(job.phase)
                keys = self.cycle(i)
                with self.journal.open("a") as journal:
                    journal.write("".join(k + "\n" for k in keys))
                submitted = submit_sync(self.app, self.jobs, str(self.root), JobKind.INCREMENT)  # type: ignore[arg-type]
                if submitted.refused:  # the reindex holds the live lock: its switch
                    return
                self.increments.append(submitted.job_id)
                done = wait_job(self.jobs, submitted.job_id, 180)
                assert done.state == JobState.DONE, (done, self.jobs.problems(done.id))
        except BaseException as exc:
            self.error = exc


def test_a_reindex_switches_while_photos_change_and_rollback_is_current(
    two_versions: tuple[Path, TritonServer], tmp_path: Path
) -> None:
    repo, server = two_versions
    journal = tmp_path / "changes.log"
    journal.touch()
    settings = settings_for(
        tmp_path / "data",
        server.url,
        repo,
        model_version=1,
        feed=journal.as_uri(),
        shard_size=10,  # three shards: a listing of one is not of everything
        visibility_timeout_s=5,  # nudges every 5 s
    )
    jobs = Jobs.from_settings(settings)
    root = tmp_path / "photos"
    keys = list(photo_folder(root, 24))
    write_photo(root / "a-meta/m0.jpg", 50)
    write_photo(root / "a-meta/m1.jpg", 51)
    (root / "a-meta" / "photos.jsonl").write_text(
        json.dumps({"path": "m0.jpg", "title": "first"}) + "\n"
    )
    source = CountingSource(root)
    uri = check_source(str(root), settings)
    store = open_store(settings)
    runtime = Runtime(settings, store=store, sources={uri: source})
    everything = all_queues(settings)
    try:
        with worker_thread(create_app(settings), runtime, queues=everything):
            first = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)))
            assert (first.state, first.done) == ("done", 26), first
        v1 = store.resolve(LIVE_ALIAS)

        # The load is planned (listed) with no embedding worker; a photo goes before its read.
        with worker_thread(
            create_app(settings), runtime, queues=[control_queue(settings), plan_queue(settings)]
        ):
            reindex = submit_reindex(tasks(settings), jobs, 2, str(root)).job_id
            wait_job(jobs, reindex, until=lambda j: j.batches_total > 0 and not j.planning)
        (root / "day1/photo005.jpg").unlink()
        journal.write_text(journal.read_text() + "day1/photo005.jpg\n")
        keys.remove("day1/photo005.jpg")
        source.counting = True

        # An experiment on the new collection holds its switch (the reindex replays the
        # changes meanwhile) until the nightly side has run its increments: without it, how
        # many come before the switch is a race between the two.
        new = jobs.get(reindex)
        assert new is not None
        prefix = settings.redis.prefix
        hold = start(jobs.redis, prefix, live=v1, candidate=new.collection, share=0.05)
        changer = Changer(root, keys, journal, jobs, tasks(settings), reindex)
        with worker_thread(create_app(settings), runtime, queues=everything):
            changer.start()
            wait_until(
                lambda: len(changer.increments) >= 3 or changer.error is not None,
                300,
                "three increments while the switch is held",
            )
            end(jobs.redis, prefix, hold.id, "switch", by="admin")
            job = wait_job(jobs, reindex, 300)
            changer.join(300)
            wait_idle(jobs, 300)
        assert changer.error is None, changer.error
        assert job.state == JobState.DONE, (job, jobs.problems(reindex))
        assert job.failed == 0 and job.lag == 0, job
        # Changes arrived through the load and after it, and were replayed.
        assert changer.phases[0] == JobPhase.LOAD and len(changer.increments) >= 3, changer.phases
        assert job.replayed > 0, job
        # The photo deleted between its listing and its read is a delete, not a problem.
        problems = [p for j in [reindex, *changer.increments] for p in jobs.problems(j)]
        assert not any("gone from the source" in p for p in problems), problems
        # No full listing after the load: only the shards of the retitled photos' folder.
        assert source.listed, "the manifest changes re-plan their folder's shards"
        assert ("", None) not in source.listed, source.listed
        folder = ("a-meta/", "a-meta0")
        assert all(lo < folder[1] and (hi is None or hi > folder[0]) for lo, hi in source.listed)

        v2 = store.resolve(LIVE_ALIAS)
        assert model_version_of(v2) == 2 and store.aliases()[PREVIOUS_ALIAS] == v1
        # At the switch the new collection held exactly what the live one held: v1 has taken
        # no write since, and the keys changed after the switch wait in its log.
        after_switch = runtime.capture.pending(v1)
        was, now = held(store, v1), held(store, v2)
        assert {k: v for k, v in was.items() if k not in after_switch} == {
            k: v for k, v in now.items() if k not in after_switch
        }

        # After the next sync, the source; then a photo deleted and one added after the switch.
        with worker_thread(create_app(settings), runtime, queues=everything):
            assert wait_job(jobs, queue_sync(tasks(settings), jobs, str(root))).state == "done"
            assert held(store, v2) == in_source(root)
            (root / "day1/photo001.png").unlink()
            write_photo(root / "late/added.jpg", 300)
            journal.write_text(journal.read_text() + "day1/photo001.png\nlate/added.jpg\n")
            increment = submit_sync(tasks(settings), jobs, str(root), JobKind.INCREMENT).job_id
            assert wait_job(jobs, increment).state == "done"
            rolled = wait_job(jobs, submit_rollback(tasks(settings), jobs), 180)
        assert rolled.state == JobState.DONE, rolled
        assert store.aliases() == {LIVE_ALIAS: v1, PREVIOUS_ALIAS: v2}
        back = held(store, v1)
        assert "day1/photo001.png" not in back and "late/added.jpg" in back
        assert back == in_source(root)
        assert titles(store, v1, ["a-meta/m0.jpg"]) == titles(store, v2, ["a-meta/m0.jpg"])
    finally:
        runtime.close()
        store.close()
        drop_keys(settings)
