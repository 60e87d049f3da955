"""The quality gate at a reindex's switch, with the tiny model trained on synthetic photos and
its untrained twin served by a real Triton, a real Celery worker on the real Redis queues, and
Qdrant Edge: a reindex from the trained model to its untrained twin is refused with both
figures in the job record; forced, it switches; the reverse switches; and a gate with no
judgement set says so and switches on counts. (A reindex held by an experiment:
test_experiment_reindex.py.)

The synthetic photos are indexed once, then reindexed four times in one module-scoped run (a
reindex of them is the slow part); each test reads the job records it left. Qdrant Edge admits
one process per store, so this test's process owns it and runs the worker on its threads, as
`photosearch up` does in the embedded mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.jobs import Jobs
from core.jobstatus import JobState, JobStatus
from core.settings import Settings
from core.submit import queue_sync, submit_reindex
from core.taskqueue import all_queues
from core.vectorstore import LIVE_ALIAS, model_version_of, open_store
from harness.processes import triton_ports
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.jobs.quality_gate import NOT_CONFIGURED
from indexer.runtime import Runtime
from model.synthetic_judgements import SyntheticSet
from model.triton_server import TritonServer
from tests.support.indexing import cli, drop_keys, settings_for, tasks, wait_job
from tests.support.trained import TRAINED, TRAINED_AGAIN, UNTRAINED

# A ceiling that only bounds a hang: a reindex embeds every synthetic photo again.
JOB_S = 600


@dataclass
class Runs:
    """The jobs of the module's run, by what each showed, and the live collection after."""

    settings: Settings
    jobs: Jobs
    refused: JobStatus
    refused_status: str  # `photosearch index status JOB` of the refused one
    forced: JobStatus
    reverse: JobStatus
    unconfigured: JobStatus
    live_after_refusal: int  # the model version live once the refusal was recorded
    live: list[int]  # after each switch, in order


def reindex(settings: Settings, jobs: Jobs, version: int, source: str, **kw: Any) -> JobStatus:
    return wait_job(
        jobs, submit_reindex(tasks(settings), jobs, version, source, **kw).job_id, JOB_S
    )


@pytest.fixture(scope="module")
def runs(
    trained_repository: Path,
    synthetic_photos: SyntheticSet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("gate")
    source = str(synthetic_photos.photos)
    with TritonServer(trained_repository, triton_ports(), tmp / "triton") as server:
        settings = settings_for(
            tmp / "data",
            server.url,
            trained_repository,
            model_version=TRAINED,
            judgements=(str(synthetic_photos.judgements),),
        )
        # The same deployment with no judgement set: the gate's other case.
        indexer = settings.indexer.model_copy(update={"judgements": ()})
        unjudged = settings.model_copy(update={"indexer": indexer})
        jobs = Jobs.from_settings(settings)
        store = open_store(settings)
        runtime = Runtime(settings, store=store)
        bare = Runtime(unjudged, store=store)
        queues = all_queues(settings)
        live: list[int] = []
        try:
            with worker_thread(create_app(settings), runtime, queues=queues):
                first = wait_job(jobs, queue_sync(tasks(settings), jobs, source), JOB_S)
                assert first.done == synthetic_photos.count, first
                refused = reindex(settings, jobs, UNTRAINED, source)
                after_refusal = model_version_of(store.resolve(LIVE_ALIAS))
                refused_status = cli(settings, "index", "status", refused.id).stdout
                forced = reindex(settings, jobs, UNTRAINED, source, force=True)
                live.append(model_version_of(store.resolve(LIVE_ALIAS)))
                reverse = reindex(settings, jobs, TRAINED_AGAIN, source)
                live.append(model_version_of(store.resolve(LIVE_ALIAS)))
            with worker_thread(create_app(unjudged), bare, queues=queues):
                # A lower version than the live one: nothing refuses it.
                unconfigured = reindex(unjudged, jobs, TRAINED, source)
                live.append(model_version_of(store.resolve(LIVE_ALIAS)))
            yield Runs(
                settings,
                jobs,
                refused,
                refused_status,
                forced,
                reverse,
                unconfigured,
                after_refusal,
                live,
            )
        finally:
            bare.close()
            runtime.close()
            store.close()
            drop_keys(settings)


def ndcg(gate: dict[str, Any], side: str) -> float:
    [found] = gate["sets"]
    mean: float = found[side]["ndcg"]["mean"]
    return mean


def test_a_switch_to_the_untrained_twin_is_refused_with_both_figures(runs: Runs) -> None:
    job = runs.refused
    assert (job.state, job.refused) == (JobState.FAILED, True), job
    assert job.message.startswith("refused by the quality gate: nDCG@10"), job.message
    assert "--force" in job.message
    gate = job.to_dict()["quality"]
    assert gate["status"] == "refused"
    assert (gate["live"]["model_version"], gate["new"]["model_version"]) == (TRAINED, UNTRAINED)
    # Both figures, the twin's lower by more than the drop allowed (in hybrid mode the
    # keyword side, the same for both, narrows the gap: 0.61 against 0.54 when measured).
    assert ndcg(gate, "live") > ndcg(gate, "new") + 0.01, gate
    [found] = gate["sets"]
    assert found["failed"] and found["difference"]["ndcg"]["mean"] < -0.01, found
    assert found["queries"] > 0 and set(found["live"]) == {"ndcg", "recall", "mrr"}
    assert runs.live_after_refusal == TRAINED  # the alias never moved
    # `index status` shows both side by side.
    assert "quality gate: refused by the quality gate" in runs.refused_status
    assert f"LIVE m{TRAINED}" in runs.refused_status and f"NEW m{UNTRAINED}" in runs.refused_status


def test_force_overrides_the_gate_and_records_the_figures(runs: Runs) -> None:
    job = runs.forced
    assert job.state == JobState.DONE, (job, runs.jobs.problems(job.id))
    gate = job.to_dict()["quality"]
    assert gate["status"] == "overridden" and gate["message"].startswith(
        "quality gate overridden (forced)"
    )
    assert ndcg(gate, "live") > ndcg(gate, "new") + 0.01, gate
    assert "quality gate overridden (forced)" in job.message
    assert runs.live[0] == UNTRAINED


def test_the_switch_back_to_a_trained_model_passes_the_gate(runs: Runs) -> None:
    job = runs.reverse
    assert job.state == JobState.DONE, (job, runs.jobs.problems(job.id))
    gate = job.to_dict()["quality"]
    assert gate["status"] == "passed", gate
    assert ndcg(gate, "new") > ndcg(gate, "live") + 0.01, gate
    assert runs.live[1] == TRAINED_AGAIN


def test_without_judgement_sets_the_gate_says_so_and_switches_on_counts(runs: Runs) -> None:
    job = runs.unconfigured
    assert job.state == JobState.DONE, (job, runs.jobs.problems(job.id))
    assert job.to_dict()["quality"]["status"] == "unconfigured"
    assert job.message.endswith(NOT_CONFIGURED)
    assert runs.live[2] == TRAINED
