"""Automatic tags end to end, with the tiny model trained on synthetic photos and its untrained
twin served by a real Triton, a real Celery worker on the real Redis queues, and Qdrant Edge.

Each version's tag rule is calibrated by `photosearch model calibrate-tags` on the synthetic
set (seed 0) with its truth (each photo's shape, colour and texture); the photos indexed are
the held-back ones (model/heldback.py), which neither training nor calibration saw. One
module-scoped run: a sync with the trained version, a vocabulary change and a second sync,
a reindex to the untrained twin and one back to the trained model; each test reads what it
left. Qdrant Edge admits one process per store, so this test's process owns it and runs the
worker on its threads, as `photosearch up` does in the embedded mode.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.embedding.manifest import load_manifest
from core.jobs import Jobs
from core.jobstatus import JobState, JobStatus
from core.keywords import FIELDS, photo_words, query_vector
from core.settings import Settings
from core.submit import queue_sync, submit_reindex
from core.tagging.vocabulary import load_vocabulary
from core.taskqueue import all_queues
from core.vectorstore import LIVE_ALIAS, VectorStore, model_version_of, open_store
from core.vectorstore.base import AUTO_TAGS_FIELD, TAGGED_WITH_FIELD
from harness.observe import Metrics, fetch_text
from harness.processes import triton_ports
from indexer.app import create_app
from indexer.host import worker_thread
from indexer.runtime import Runtime
from model.heldback import held_back_photos
from model.synthetic import COLOURS, DEFAULT_SEED, SHAPES, TEXTURES, generate, write_photos
from model.synthetic_judgements import SyntheticSet
from model.synthetic_labels import VOCABULARY_FILE, labels, write_labels
from model.triton_server import TritonServer
from tests.support.indexing import cli, drop_keys, settings_for, tasks, wait_job
from tests.support.trained import TRAINED, TRAINED_AGAIN, UNTRAINED, calibrate_tags

# A ceiling that only bounds a hang: a reindex embeds every photo again.
JOB_S = 600
# Held-back photos indexed: three true tags each, out of 18 names (chance: 1/6).
PHOTOS = 300
CHANCE = 3 / 18
# Precision and recall of the stored tags against each photo's content, micro-averaged, as
# this module's run measured them (printed by the first test). The floors leave room for
# another machine's float noise and still demand well over chance (a random tagger giving as
# many tags a photo, 4.4, has precision 0.167 and recall 0.246).
PRECISION_FLOOR = 0.40  # measured 0.462 (the calibration's own, in-sample: 0.468)
RECALL_FLOOR = 0.60  # measured 0.681 (in-sample: 0.691)
# The vocabulary after the change: the textures left out.
CHANGED = (*SHAPES, *COLOURS)

Tags = dict[str, tuple[list[str], str]]  # photo id -> (auto_tags, auto_tags_vocabulary)


@dataclass
class Runs:
    """What the module's run left: the jobs, the tags stored after each, the image model's
    inference counts around the re-tagging sync, and the live store."""

    settings: Settings
    jobs: Jobs
    store: VectorStore
    truth: dict[str, frozenset[str]]
    first: JobStatus
    first_tags: Tags
    retag: JobStatus
    retag_tags: Tags
    inferences: tuple[float, float, float]  # before the first sync, before and after the retag
    untrained: JobStatus
    untrained_tags: Tags
    # `photosearch index status JOB` of the reindex to the twin, and with --json.
    untrained_status: tuple[str, str]
    trained_again: JobStatus
    trained_again_tags: Tags
    live: str


def calibrate(repo: Path, version: int, photos: Path, labelled: Path) -> None:
    print(calibrate_tags(repo, version, photos, labelled))  # the figures, for the report


def stored_tags(store: VectorStore) -> Tags:
    collection = store.resolve(LIVE_ALIAS)
    ids = [p.photo_id for p in store.points(collection)]
    fields = (AUTO_TAGS_FIELD, TAGGED_WITH_FIELD)
    return {
        p.photo_id: (list(p.payload.get(AUTO_TAGS_FIELD) or []), str(p.payload[TAGGED_WITH_FIELD]))
        for p in store.retrieve(collection, ids, fields=fields)
    }


def image_inferences(metrics_url: str) -> float:
    """Images Triton's image model has embedded so far (nv_inference_count counts images)."""
    return Metrics(fetch_text(metrics_url))("nv_inference_count", model="clip_image")


@pytest.fixture(scope="module")
def runs(
    trained_repository: Path,
    synthetic_photos: SyntheticSet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("tags")
    repo = Path(shutil.copytree(trained_repository, tmp / "models"))
    labelled = tmp / "labels"
    write_labels(generate(synthetic_photos.count, DEFAULT_SEED), labelled)
    for version in (TRAINED, UNTRAINED, TRAINED_AGAIN):
        calibrate(repo, version, synthetic_photos.photos, labelled)
    held_back = held_back_photos(PHOTOS)
    photos = tmp / "photos"
    write_photos(held_back, photos)
    truth = {p.id: frozenset(labels(p.content)) for p in held_back}
    vocabulary = tmp / "vocabulary.txt"
    shutil.copyfile(labelled / VOCABULARY_FILE, vocabulary)
    source = str(photos)
    with TritonServer(repo, triton_ports(), tmp / "triton") as server:
        metrics = f"http://127.0.0.1:{server.ports.metrics}/metrics"
        settings = settings_for(
            tmp / "data", server.url, repo, model_version=TRAINED, tag_vocabulary=vocabulary
        )
        jobs = Jobs.from_settings(settings)
        store = open_store(settings)
        runtime = Runtime(settings, store=store)
        try:
            with worker_thread(create_app(settings), runtime, queues=all_queues(settings)):
                start = image_inferences(metrics)
                first = wait_job(jobs, queue_sync(tasks(settings), jobs, source), JOB_S)
                first_tags = stored_tags(store)
                vocabulary.write_text("# shapes and colours\n" + "\n".join(CHANGED) + "\n")
                before = image_inferences(metrics)
                retag = wait_job(jobs, queue_sync(tasks(settings), jobs, source), JOB_S)
                after = image_inferences(metrics)
                retag_tags = stored_tags(store)
                job = submit_reindex(tasks(settings), jobs, UNTRAINED, source).job_id
                untrained = wait_job(jobs, job, JOB_S)
                untrained_tags = stored_tags(store)
                plain = cli(settings, "index", "status", untrained.id).stdout
                as_json = cli(settings, "index", "status", untrained.id, "--json").stdout
                job = submit_reindex(tasks(settings), jobs, TRAINED_AGAIN, source).job_id
                trained_again = wait_job(jobs, job, JOB_S)
                trained_again_tags = stored_tags(store)
            yield Runs(
                settings,
                jobs,
                store,
                truth,
                first,
                first_tags,
                retag,
                retag_tags,
                (start, before, after),
                untrained,
                untrained_tags,
                (plain, as_json),
                trained_again,
                trained_again_tags,
                store.resolve(LIVE_ALIAS),
            )
        finally:
            runtime.close()
            store.close()
            drop_keys(settings)


def figures(tags: Tags, truth: dict[str, frozenset[str]]) -> tuple[float, float]:
    """Micro-averaged precision and recall of the stored tags against the photos' content."""
    made = sum(len(given) for given, _ in tags.values())
    hits = sum(len(set(given) & truth[pid]) for pid, (given, _) in tags.items())
    wanted = sum(len(truth[pid]) for pid in tags)
    return hits / made if made else 0.0, hits / wanted


def test_the_trained_model_s_tags_find_each_photo_s_content_far_above_chance(
    runs: Runs,
) -> None:
    assert runs.first.state == JobState.DONE and runs.first.done == PHOTOS, runs.first
    assert set(runs.first_tags) == set(runs.truth)
    precision, recall = figures(runs.first_tags, runs.truth)
    # The benchmark's figure (the calibration's own, in-sample, is printed by the fixture).
    print(f"auto_tags of {PHOTOS} held-back photos: precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= PRECISION_FLOOR and recall >= RECALL_FLOOR, (precision, recall)
    assert precision > 2 * CHANCE and recall > 2 * CHANCE
    keys = {key for _, key in runs.first_tags.values()}
    assert len(keys) == 1 and keys != {""}  # every photo tagged with the one vocabulary
    assert not any(line.startswith("model version") for line in runs.jobs.problems(runs.first.id))


def test_a_vocabulary_change_re_tags_every_photo_without_an_image_inference(runs: Runs) -> None:
    start, before, after = runs.inferences
    assert before - start >= PHOTOS  # the first sync embedded every photo through Triton
    assert after == before  # the second embedded none
    job = runs.retag
    assert job.state == JobState.DONE, (job, runs.jobs.problems(job.id))
    assert (job.done, job.updated) == (0, PHOTOS), job
    # The rule was calibrated with the 18 names: the job says to calibrate it with the 14.
    [said] = [line for line in runs.jobs.problems(job.id) if line.startswith("model version")]
    assert said.startswith(f"model version {TRAINED}: auto tags: the vocabulary (digest ")
    [old] = {key for _, key in runs.first_tags.values()}
    [new] = {key for _, key in runs.retag_tags.values()}
    assert new not in ("", old)
    given = {tag for tags, _ in runs.retag_tags.values() for tag in tags}
    assert given <= set(CHANGED) and given & set(SHAPES) and given & set(COLOURS)
    assert any(set(tags) & set(TEXTURES) for tags, _ in runs.first_tags.values())
    # The shapes and colours the photos keep are found as well as before (the rule's margin
    # is over a smaller vocabulary's mean now, so not tag for tag the same).
    kept = {pid: frozenset(truth - set(TEXTURES)) for pid, truth in runs.truth.items()}
    precision, recall = figures(runs.retag_tags, kept)
    assert precision > 2 * CHANCE and recall > 2 * CHANCE, (precision, recall)


def test_the_untrained_twin_stores_no_tags_and_its_job_says_why(runs: Runs) -> None:
    job = runs.untrained
    assert job.state == JobState.DONE, (job, runs.jobs.problems(job.id))
    assert set(runs.untrained_tags) == set(runs.truth)
    assert all(tags == ([], "") for tags in runs.untrained_tags.values())
    calibration = load_manifest(runs.settings.repository, UNTRAINED).calibration
    assert calibration is not None and calibration.tagging is not None
    assert not calibration.tagging.enabled
    said = [line for line in runs.jobs.problems(job.id) if line.startswith("model version")]
    assert said == [f"model version {UNTRAINED}: auto tags off: {calibration.tagging.reason}"]
    plain, as_json = runs.untrained_status
    assert f"problem: {said[0]}" in plain
    [shown] = json.loads(as_json)["jobs"]
    assert said[0] in shown["problems"]


def test_a_model_update_recomputes_the_tags_with_the_new_version(runs: Runs) -> None:
    job = runs.trained_again
    assert job.state == JobState.DONE and job.done == PHOTOS, job
    assert model_version_of(runs.live) == TRAINED_AGAIN
    tags = runs.trained_again_tags
    assert set(tags) == set(runs.truth)
    # The same weights and calibration as version 1, the same vocabulary: the tags the
    # re-tagging sync gave, recomputed from new embeddings (the twin's collection had none).
    assert {key for _, key in tags.values()} == {key for _, key in runs.retag_tags.values()}
    same = sum(set(tags[pid][0]) == set(runs.retag_tags[pid][0]) for pid in tags)
    assert same >= 0.95 * PHOTOS, same
    assert sum(bool(given) for given, _ in tags.values()) >= 0.9 * PHOTOS


def test_a_keyword_search_finds_a_photo_by_an_automatic_tag_its_words_lack(runs: Runs) -> None:
    collection = runs.live
    payloads = {p.photo_id: p.payload for p in runs.store.retrieve(collection, sorted(runs.truth))}
    found = [
        (pid, tag)
        for pid, payload in payloads.items()
        for tag in payload.get(AUTO_TAGS_FIELD) or []
        if tag not in photo_words(payload, FIELDS)
    ]
    assert found, "no photo has an automatic tag its title, tags and photographer lack"
    pid, tag = found[0]
    hits = runs.store.keyword_search(collection, query_vector(tag), limit=PHOTOS)
    assert pid in {hit.photo_id for hit in hits}
    # Only the automatic tags hold the word for some photos found: without them, fewer match.
    typed = {p for p, payload in payloads.items() if tag in photo_words(payload, FIELDS)}
    assert len(hits) > len(typed)
    assert load_vocabulary(Path(str(runs.settings.indexer.tag_vocabulary))).names == CHANGED
