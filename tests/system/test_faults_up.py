"""Faults on the whole system: Triton, Redis and the API killed (SIGKILL) under search load
and in the middle of a sync, on one `photosearch up` whose supervisor starts them again.

Each test sends steady searches from threads, starts a sync of new photos through the admin
API, kills a process while both run, and then asks: was every search answered (from the
cache, without it, or with a fast 503 and Retry-After), did the system come back by itself,
and does the index hold every photo of the source exactly once? And a sync followed from the
command line (`index sync --wait`) waits through two kills of the queue's Redis and exits
with the job's own outcome.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from core.jobstatus import FINISHED
from harness.processes import free_ports
from harness.up import newcomer_env
from tests.support.browser import cards, search
from tests.support.faultload import (
    KEYS,
    SearchLoad,
    jobs_of,
    live_points,
    missing_photos,
    start_sync,
)
from tests.support.indexing import photo_folder, wait_job, write_photo
from tests.support.upprocess import Up, ready
from tests.support.waiting import wait_until

FIRST_PHOTOS = 24
# Queries searched before each fault, so their embeddings are in the cache when it strikes.
WARM = ["a cat on a sofa", "a rocket launch", "coffee in a cup", "an astronaut"]
# A ceiling on a recovery that only bounds a hang. How soon `up` is back after a dependency
# dies (30 s, the bound) is a benchmark's figure, not this test's.
RECOVERY_CEILING_S = 180


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, repository: Path) -> Iterator[tuple[Up, Path]]:
    root = tmp_path_factory.mktemp("faults")
    # The tiny model, exported beforehand: `up` serves it as it would its own first export
    # (test_up covers that export of ViT-B-32), and a Triton killed here loads it again in
    # seconds rather than the large model's tens of seconds.
    shutil.copytree(repository, root / "data" / "models")
    photos = root / "photos"
    photo_folder(photos, FIRST_PHOTOS)
    api, redis = free_ports(2)
    env = newcomer_env() | {
        "PHOTOSEARCH_API__KEYS": json.dumps(KEYS),
        "PHOTOSEARCH_UP__PROBE_INTERVAL_S": "1",
        # Batches of 8, so a sync of 120 photos is many tasks and a kill lands between them.
        "PHOTOSEARCH_INDEXER__BATCH_SIZE": "8",
        # A task the worker had fetched when the queue's Redis died is redelivered after the
        # visibility timeout (kombu's ack emulation), and the token it held is swept after as
        # long: an hour by default, a minute here, within the sync's wait below.
        "PHOTOSEARCH_INDEXER__VISIBILITY_TIMEOUT_S": "60",
    }
    up = Up(root / "data", api, redis, env, args=("--photos", str(photos)))
    up.start()
    try:
        yield up, photos
    finally:
        if up.process is not None and up.process.poll() is None:
            up.stop()


def add_photos(photos: Path, count: int) -> list[str]:
    """count new photos, variants no earlier call wrote; returns their keys."""
    present = sum(1 for p in photos.rglob("*") if p.is_file())
    keys = [f"added/photo{i:04d}.jpg" for i in range(present, present + count)]
    for n, key in enumerate(keys):
        write_photo(photos / key, 1000 + present + n)
    return keys


def source_ids(photos: Path) -> list[str]:
    return sorted(str(p.relative_to(photos)) for p in photos.rglob("*") if p.is_file())


def child_pid(up: Up, name: str) -> int:
    pid: int = up.state()["children"][name]
    return pid


def kill_when_syncing(up: Up, job_id: str, name: str, photos_done: int) -> tuple[int, float]:
    """SIGKILL a child once the sync has embedded some photos but not all; (pid, when)."""
    found = wait_job(jobs_of(up), job_id, 120, up, until=lambda j: j.done >= photos_done)
    assert found.done < found.total, f"the sync ended before the kill: {found}"
    pid = child_pid(up, name)
    os.kill(pid, signal.SIGKILL)
    return pid, time.monotonic()


def wait_restarted(up: Up, name: str, pid: int) -> float:
    """Until the supervisor has started the child again and the API is ready; when."""
    wait_until(
        lambda: up.state()["children"].get(name) not in (None, pid) and ready(up),
        180,
        f"{name} was not started again:\n{up.output()[-3000:]}",
    )
    return time.monotonic()


def assert_index_complete(up: Up, photos: Path) -> None:
    ids = source_ids(photos)
    assert live_points(up) == len(ids)
    # One point per id (the point id is derived from the photo id): every id found and the
    # count equal to the source's means no photo is missing and none is there twice.
    assert missing_photos(up, ids) == []


def warm_cache(up: Up) -> None:
    for q in WARM:
        response = httpx.get(up.url + "/v1/search", params={"q": q, "limit": 5}, timeout=30)
        assert response.status_code == 200, response.text


@contextmanager
def killed_during_sync(
    up: Up, photos: Path, name: str
) -> Iterator[tuple[SearchLoad, str, list[str], float, float]]:
    """Searches running, a sync of 120 new photos sent, the child `name` SIGKILLed in the
    middle and started again by the supervisor: (load, job id, photos added, killed at, back
    at). The load goes on until the block ends."""
    warm_cache(up)
    added = add_photos(photos, 120)
    fresh = [f"a query during the {name} fault, number {n}" for n in range(400)]
    with SearchLoad(
        up.url, [q for pair in zip(WARM * 100, fresh, strict=False) for q in pair]
    ) as load:
        job_id = start_sync(up, str(photos))
        pid, killed = kill_when_syncing(up, job_id, name, 16)
        yield load, job_id, added, killed, wait_restarted(up, name, pid)


def test_triton_killed_during_a_sync_and_searches(system: tuple[Up, Path]) -> None:
    up, photos = system
    with killed_during_sync(up, photos, "triton") as fault:
        load, job_id, added, killed, back = fault
        # Back by itself: an uncached search answers, and the sync embeds again.
        fresh = itertools.count()  # a query never searched before: no cache answers it
        at_back = jobs_of(up).get(job_id)
        done_at_back = at_back.done if at_back else 0
        wait_until(
            lambda: (
                httpx.get(
                    up.url + "/v1/search", params={"q": f"after triton {next(fresh)}"}, timeout=30
                ).status_code
                == 200
            ),
            RECOVERY_CEILING_S,
            "uncached searches answering again after Triton's return",
        )
        final = wait_job(jobs_of(up), job_id, 600, up)
        wait_until(
            lambda: any(
                a.at > back and a.status == 200 and a.cached is False for a in load.answers
            ),
            RECOVERY_CEILING_S,
            "the load's uncached searches answering again",
        )
    print("triton", load.summary(killed, back), f"; sync: {final}")
    assert (final.state, final.failed, final.done) == ("done", 0, len(added)), final
    assert final.done > done_at_back or done_at_back == len(added)
    assert_index_complete(up, photos)

    outage = load.between(killed, back)
    assert outage, "no search was sent while Triton was down"
    unanswered = [a for a in load.answers if a.status not in (200, 503)]
    assert not unanswered, f"{unanswered}\n{up.tail()}"
    for answer in outage:
        if answer.q in WARM:
            # Its embedding is cached: the search needs no model.
            assert (answer.status, answer.cached) == (200, True), answer
        elif answer.status == 503:
            assert answer.error == "triton_unavailable" and answer.retry_after, answer
    failed = [a for a in load.answers if a.status == 503]
    assert failed, "no uncached search was sent while Triton was down"
    # Each was refused by the API at the embedding deadline, not left to the client's timeout
    # (status 0 above). How soon is a figure (the slowest, in the summary printed above), not
    # a bound a test on a shared machine can hold.
    assert all(a.error == "triton_unavailable" and a.retry_after for a in failed), failed


def test_redis_killed_during_a_sync_and_searches(system: tuple[Up, Path]) -> None:
    up, photos = system
    with killed_during_sync(up, photos, "redis") as fault:
        load, job_id, added, killed, back = fault
        final = wait_job(jobs_of(up), job_id, 600, up)
    print("redis", load.summary(killed, back), f"; sync: {final}")
    # Queued batches are kept across the kill (the queue's Redis writes every change to its
    # append-only file before answering) and the worker reconnected to run them.
    assert (final.state, final.failed, final.done) == ("done", 0, len(added)), final
    assert_index_complete(up, photos)
    outage = load.between(killed, back)
    assert outage, "no search was sent while Redis was down"
    # Searches need Redis only for the cache: without it they answer, uncached.
    # All of them, with what `up` said (a child it started again shows there), if any failed.
    unanswered = [a for a in load.answers if a.status != 200]
    assert not unanswered, f"{unanswered}\n{up.tail()}"
    # And the worker runs new work after the restart, with nothing left over.
    more = add_photos(photos, 8)
    after = wait_job(jobs_of(up), start_sync(up, str(photos)), 300, up)
    assert (after.state, after.done, after.failed) == ("done", len(more), 0), after
    assert_index_complete(up, photos)


def test_the_api_killed_while_the_page_is_open_comes_back_by_itself(
    system: tuple[Up, Path], page: Page
) -> None:
    up, _ = system
    page.goto(up.url + "/")
    search(page, "a cat on a sofa")
    assert len(cards(page)) > 0
    pid = child_pid(up, "api")
    os.kill(pid, signal.SIGKILL)
    # The page, open all along, says the service cannot be reached while it is down...
    search(page, "a rocket launch")
    expect(page.get_by_test_id("status")).to_contain_text("cannot be reached")
    wait_restarted(up, "api", pid)
    # ...and searches again once the supervisor has started it: no reload, no manual step.
    search(page, "a rocket launch")
    assert len(cards(page)) > 0
    expect(page.get_by_test_id("status")).not_to_contain_text("cannot be reached")


class Following:
    """`photosearch index sync --wait` against the running `up`, its output read as it comes:
    each line of stdout and stderr kept, to be waited for as an event."""

    def __init__(self, up: Up, source: Path) -> None:
        # No PHOTOSEARCH_REDIS__URL: the command finds the `up` running on its data directory.
        env = up.env | {"PHOTOSEARCH_DATA_DIR": str(up.data_dir)}
        command = ["index", "sync", "--source", str(source), "--wait"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "photosearch", *command],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        assert self.process.stdout is not None and self.process.stderr is not None
        self.readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def said(self) -> str:
        return "stdout:\n" + "\n".join(self.out) + "\nstderr:\n" + "\n".join(self.err)

    def job_id(self) -> str | None:
        for line in self.out:
            found = re.search(r"job (\w+) queued|joined the running job (\w+)", line)
            if found:
                return found.group(1) or found.group(2)
        if self.process.poll() is not None:
            raise AssertionError(f"the command exited before a job was queued:\n{self.said()}")
        return None

    def wait_said(self, text: str, times: int, up: Up) -> None:
        """Until stderr has `times` lines holding `text` (a ceiling only bounds a hang); an
        AssertionError at once if the command exits first."""

        def enough() -> bool:
            return sum(text in line for line in self.err) >= times

        def said_or_exited() -> bool:
            if enough():
                return True
            code = self.process.poll()
            if code is None:
                return False
            for reader in self.readers:  # its last lines
                reader.join(10)
            if enough():
                return True
            raise AssertionError(f"the command exited ({code}) first:\n{self.said()}")

        wait_until(
            said_or_exited,
            RECOVERY_CEILING_S,
            lambda: f"{times} x {text!r} from the command:\n{self.said()}\n{up.tail()}",
        )

    def finish(self) -> int:
        """Its exit code, once it has exited (killed if it has not within the ceiling)."""
        try:
            code = self.process.wait(600)
        finally:
            self.close()
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        for reader in self.readers:
            reader.join(10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def held(up: Up) -> Iterator[None]:
    """`up` stopped (SIGSTOP) for the block, and its children left running: what it would
    restart stays down until the block ends, however soon it would otherwise."""
    assert up.process is not None
    os.kill(up.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(up.process.pid, signal.SIGCONT)


def kill_redis_until_the_command_notices(up: Up, sync: Following, kill: int) -> None:
    """SIGKILL the queue's Redis and let `up` start it again once the command has said it
    lost it (the outage lasts until then: a poll of the command's sees it), then until the
    command has said it is back."""
    pid = child_pid(up, "redis")
    with held(up):
        os.kill(pid, signal.SIGKILL)
        sync.wait_said("lost Redis at ", kill, up)
    wait_restarted(up, "redis", pid)
    sync.wait_said("reconnected after ", kill, up)


def test_a_sync_followed_with_wait_rides_out_two_kills_of_the_queue_s_redis(
    system: tuple[Up, Path],
) -> None:
    up, photos = system
    added = add_photos(photos, 120)
    sync = Following(up, photos)
    try:
        job_id = wait_until(sync.job_id, RECOVERY_CEILING_S, sync.said)
        # The first kill once the sync has embedded some photos, while the command follows it.
        wait_job(jobs_of(up), job_id, RECOVERY_CEILING_S, up, until=lambda j: j.done >= 16)
        kill_redis_until_the_command_notices(up, sync, 1)
        # The second as soon as the command is back, while the job still runs (its worker
        # reconnects to the new Redis on its own, and later).
        job = jobs_of(up).get(job_id)
        assert job is not None and job.state not in FINISHED, job
        kill_redis_until_the_command_notices(up, sync, 2)
        code = sync.finish()
    finally:
        sync.close()
    print("index sync --wait through two kills of Redis:", sync.said())
    assert code == 0, f"{sync.said()}\n{up.tail()}"
    lost = [line for line in sync.err if line.startswith("lost Redis at ")]
    assert len(lost) == 2
    assert all(
        "retrying for up to 120 s (PHOTOSEARCH_LIFECYCLE__RECONNECT_S)" in line for line in lost
    ), lost
    assert not any("cannot reach Redis" in line for line in sync.err), sync.said()
    # It ends with the job's own counts: every photo added, none failed.
    summary = next(line for line in sync.out if line.startswith(job_id))
    assert f"sync      done       done {len(added)}  failed 0" in summary, sync.said()
    assert_index_complete(up, photos)
