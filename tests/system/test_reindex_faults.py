"""A reindex through its faults: Triton down past the retry budget (paused, then on again), its
workers SIGKILLed (resumed), an operator's cancel (resumed); each switches, counts no photo
failed, and embeds again at most the batches that were in flight.

Version 2's image model runs under a wrapper that logs each execution's images as it begins,
then takes a permit from a FIFO the test writes to: the test decides how many executions pass
before the fault and holds the next one, so the fault meets known batches in flight. Triton's
own statistics are summed over the server's lives (read while an execution is held, a killed
life's count is final); the log, which outlives them, bounds them from above.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import tritonclient.grpc as grpcclient

from core.embedding.manifest import IMAGE_MODEL
from core.jobs import Jobs
from core.jobstatus import JobPhase, JobState, JobStatus
from core.settings import Settings
from core.sources import LocalSource
from core.submit import queue_sync, submit_reindex, submit_resume
from core.vectorstore import LIVE_ALIAS, PREVIOUS_ALIAS, model_version_of, open_store
from harness.processes import triton_ports
from model.repository import PYTHON_BACKEND, version_dir
from model.triton_server import TritonServer
from tests.support.indexing import (
    WorkerProcess,
    cli,
    indexer_settings,
    photo_folder,
    tasks,
    wait_job,
)
from tests.support.waiting import wait_until

PHOTOS = 32
BATCH = 2
CONCURRENCY = 2
# Executions of the new model that pass before the fault: their photos (at least one batch
# each) must not be embedded again, and are more than the in-flight allowance below.
PASSED = 4
# At most every worker thread's batch was in flight at the fault, and is embedded again.
IN_FLIGHT = CONCURRENCY * BATCH

# Wraps the served python-backend model of version 2. Logs each execution's images per request
# (one line, one write: whole lines only), then waits for a permit unless the gate is open.
# Triton's warmup (all zeros) passes untouched: no photo is black.
COUNTED_MODEL = """
import importlib.util, json, os

_here = os.path.dirname(__file__)
_spec = importlib.util.spec_from_file_location("served", os.path.join(_here, "served.py"))
served = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(served)
pb_utils = served.pb_utils


class TritonPythonModel(served.TritonPythonModel):
    def initialize(self, args):
        super().initialize(args)
        root = args["model_repository"]  # NAME/, above the version folders
        self.log = os.path.join(root, "embedded.log")
        self.opened = os.path.join(root, "open")
        self.permits = os.open(os.path.join(root, "permits"), os.O_RDWR)

    def execute(self, requests):
        arrays = [
            pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests
        ]
        if any(a.any() for a in arrays):
            line = json.dumps([int(a.shape[0]) for a in arrays]) + "\\n"
            fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, line.encode())
            os.close(fd)
            if not os.path.exists(self.opened):
                os.read(self.permits, 1)
        return super().execute(requests)
"""


@dataclass
class CountedTriton:
    """A Triton of its own serving versions 1 and 2, version 2's image model counted and gated."""

    server: TritonServer
    repository: Path
    permits: int  # the test's end of the FIFO, open read-write: never blocks, keeps its bytes
    since: int = 0  # where this test's executions begin in the log
    baseline: int = 0  # Triton's count when this test (or this life of the server) began
    ended: int = 0  # images the lives of the server that were killed in this test counted

    @property
    def root(self) -> Path:
        return self.repository / IMAGE_MODEL

    def log(self) -> bytes:
        path = self.root / "embedded.log"
        return path.read_bytes() if path.exists() else b""

    def executions(self) -> list[list[int]]:
        """Images of each request, per execution of version 2 that began, in every life."""
        lines = self.log()[self.since :].decode().splitlines(keepends=True)
        return [json.loads(line) for line in lines if line.endswith("\n")]

    def embedded(self) -> int:
        return sum(sum(execution) for execution in self.executions())

    def statistics(self) -> int:
        """Images version 2 embedded in this life of the server, as Triton counts them."""
        client = grpcclient.InferenceServerClient(self.server.url)
        try:
            stats = client.get_inference_statistics(IMAGE_MODEL, "2")
        finally:
            client.close()
        return sum(int(model.inference_count) for model in stats.model_stats)

    def inferences(self) -> int:
        """Images version 2 embedded in this test, by Triton's statistics, over its lives."""
        return self.ended + self.statistics() - self.baseline

    def allow(self, executions: int) -> None:
        os.write(self.permits, b"x" * executions)

    def open(self) -> None:
        """Every execution passes from now on, those waiting too."""
        (self.root / "open").touch()
        os.write(self.permits, b"x" * 256)

    def close(self) -> None:
        """Executions wait for permits again; none is left over; counting starts here."""
        (self.root / "open").unlink(missing_ok=True)
        with suppress(BlockingIOError):
            while os.read(self.permits, 4096):
                pass
        self.since = len(self.log())
        self.ended, self.baseline = 0, self.statistics()

    def kill(self) -> None:
        """Stopped at once, with what it was running: SIGKILL to its process group. The
        python backend's shared memory, which a killed server leaves behind, is removed.
        Called while an execution is held: Triton's count is final when it is read."""
        assert self.server.process is not None
        self.ended += self.statistics() - self.baseline
        maps = psutil.Process(self.server.process.pid).memory_maps()
        regions = {m.path for m in maps if "/triton_python_backend_shm_region_" in m.path}
        self.server.stop(timeout_s=0)
        for region in regions:
            Path(region).unlink(missing_ok=True)

    def start(self) -> None:
        """A new life of the server, started while the gate is closed: nothing has run yet
        when its count is read."""
        self.server.start()
        self.baseline = self.statistics()


@pytest.fixture(scope="module")
def counted_triton(
    two_versions: tuple[Path, TritonServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CountedTriton]:
    source, _ = two_versions
    work = tmp_path_factory.mktemp("counted")
    repo = work / "models"
    shutil.copytree(source, repo)
    version = version_dir(repo, IMAGE_MODEL, 2)
    shutil.copyfile(PYTHON_BACKEND, version / "served.py")
    (version / "model.py").write_text(COUNTED_MODEL)
    fifo = repo / IMAGE_MODEL / "permits"
    os.mkfifo(fifo)
    permits = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    server = TritonServer(repo, triton_ports(), work / "triton")
    try:
        with server:
            yield CountedTriton(server, repo, permits)
    finally:
        os.close(permits)


@pytest.fixture
def counted(counted_triton: CountedTriton) -> Iterator[CountedTriton]:
    """The module's counted Triton, gated and counting for this test; up again after it."""
    counted_triton.close()
    try:
        yield counted_triton
    finally:
        counted_triton.open()  # a failed test's held execution ends here, not in the next test
        if not counted_triton.server.is_ready():
            counted_triton.server.start()


@pytest.fixture
def catalogue(tmp_path: Path) -> Path:
    root = tmp_path / "photos"
    photo_folder(root, PHOTOS)
    return root


def wait_for(what: str, check: Callable[[], bool], worker: WorkerProcess) -> None:
    """Until check() holds; the ceiling only bounds a hang."""
    wait_until(check, 120, lambda: f"{what}\n{worker.tail()}")


def synced_then_reindexing(
    settings: Settings, jobs: Jobs, root: Path, triton: CountedTriton, worker: WorkerProcess
) -> tuple[str, int]:
    """Version 1 live, then a reindex to version 2 held at its (PASSED + 1)th execution once the
    photos of the executions before have been stored: the job's id and those photos."""
    first = wait_job(jobs, queue_sync(tasks(settings), jobs, str(root)), worker=worker)
    assert (first.state, first.done) == (JobState.DONE, PHOTOS), first
    triton.allow(PASSED)
    submitted = submit_reindex(tasks(settings), jobs, 2, str(root))
    assert not submitted.refused, submitted
    wait_for("held execution", lambda: len(triton.executions()) > PASSED, worker)
    stored = sum(sum(execution) for execution in triton.executions()[:PASSED])
    assert stored >= PASSED * BATCH > IN_FLIGHT  # a load started over would show
    job = wait_job(jobs, submitted.job_id, worker=worker, until=lambda j: j.done >= stored)
    assert (job.state, job.phase, job.done, job.failed) == (
        JobState.RUNNING,
        JobPhase.LOAD,
        stored,
        0,
    )
    return submitted.job_id, stored


def assert_switched(settings: Settings, job: JobStatus, root: Path, triton: CountedTriton) -> None:
    """Done with every photo, none failed; version 2 live with each photo once (read after the
    worker stopped); Triton embedded at most the in-flight batches again."""
    assert job.state == JobState.DONE, job
    assert (job.done, job.failed, job.skipped, job.deleted) == (PHOTOS, 0, 0, 0), job
    store = open_store(settings)
    try:
        aliases = store.aliases()
        assert aliases[LIVE_ALIAS] == job.collection
        assert model_version_of(aliases[PREVIOUS_ALIAS]) == 1
        ids = [p.photo_id for p in store.points(job.collection)]
        assert len(ids) == len(set(ids)) == store.count(job.collection) == PHOTOS
        assert set(ids) == {o.key for o in LocalSource(root).list_range()}
    finally:
        store.close()
    # Each photo once at least; Triton's own count, at most what began (the log); and at most
    # the batches in flight at the fault again.
    inferences, embedded = triton.inferences(), triton.embedded()
    assert PHOTOS <= inferences <= embedded <= PHOTOS + IN_FLIGHT, (
        inferences,
        triton.executions(),
    )


def test_triton_down_past_the_retry_budget_pauses_the_reindex_and_it_goes_on(
    counted: CountedTriton, catalogue: Path, tmp_path: Path
) -> None:
    # A retry budget of seconds, and nudges every few seconds that ask Triton again.
    with indexer_settings(
        tmp_path / "data",
        counted.server.url,
        counted.repository,
        model_version=1,
        batch_size=BATCH,
        max_retries=2,
        retry_backoff_max_s=1,
        visibility_timeout_s=5,
    ) as settings:
        jobs = Jobs.from_settings(settings)
        with WorkerProcess(settings, tmp_path / "worker.log", CONCURRENCY) as worker:
            job_id, stored = synced_then_reindexing(settings, jobs, catalogue, counted, worker)
            counted.kill()
            paused = wait_job(
                jobs, job_id, worker=worker, until=lambda j: j.state == JobState.PAUSED
            )
            assert (paused.failed, paused.done, paused.resume_state) == (0, stored, "running")
            assert "Triton did not answer past the retry budget" in paused.message, paused

            counted.start()
            counted.open()
            job = wait_job(jobs, job_id, worker=worker)
            assert any("paused" in problem for problem in jobs.problems(job_id)), job
        assert worker.process is not None and worker.process.returncode == 0, worker.tail()
        # The execution held when Triton died was embedded again by the next Triton.
        assert counted.embedded() > PHOTOS
        assert_switched(settings, job, catalogue, counted)


def test_a_reindex_whose_workers_were_killed_resumes_with_a_fresh_worker(
    counted: CountedTriton, catalogue: Path, tmp_path: Path
) -> None:
    # Visibility left at its hour: no sweep gives the dead worker's batches back; the resume must.
    with indexer_settings(
        tmp_path / "data",
        counted.server.url,
        counted.repository,
        model_version=1,
        batch_size=BATCH,
    ) as settings:
        jobs = Jobs.from_settings(settings)
        log = tmp_path / "worker.log"
        with WorkerProcess(settings, log, CONCURRENCY) as worker:
            job_id, _ = synced_then_reindexing(settings, jobs, catalogue, counted, worker)
            worker.kill()  # SIGKILL to its process group: no warm shutdown, no ack
        counted.open()  # what the dead worker had sent runs now
        orphaned = jobs.get(job_id)
        assert orphaned is not None and orphaned.state == JobState.RUNNING, orphaned

        # Started first, as a restart policy does: it takes the job's tokens still queued
        # before the resume runs, which must leave what they hold.
        with WorkerProcess(settings, log, CONCURRENCY) as fresh:
            resumed = submit_resume(tasks(settings), jobs, job_id)
            assert (resumed.job_id, resumed.refused) == (job_id, ""), resumed
            job = wait_job(jobs, job_id, worker=fresh)
        assert_switched(settings, job, catalogue, counted)


def test_a_cancelled_reindex_resumed_from_the_command_line_switches(
    counted: CountedTriton, catalogue: Path, tmp_path: Path
) -> None:
    with indexer_settings(
        tmp_path / "data",
        counted.server.url,
        counted.repository,
        model_version=1,
        batch_size=BATCH,
    ) as settings:
        jobs = Jobs.from_settings(settings)
        with WorkerProcess(settings, tmp_path / "worker.log", CONCURRENCY) as worker:
            job_id, _ = synced_then_reindexing(settings, jobs, catalogue, counted, worker)
            cancel = cli(settings, "index", "cancel", job_id)
            assert cancel.returncode == 0 and "its work is kept" in cancel.stdout, cancel
            cancelled = jobs.get(job_id)
            assert cancelled is not None and cancelled.state == JobState.CANCELLED, cancelled
            assert cancelled.failed == 0, cancelled
            counted.open()  # the batches in flight end; the job hands out no more

            resume = cli(settings, "index", "reindex", "--resume", job_id)
            assert resume.returncode == 0, resume
            assert f"reindex job {job_id} resumed" in resume.stdout, resume
            job = wait_job(jobs, job_id, worker=worker)
        assert_switched(settings, job, catalogue, counted)
