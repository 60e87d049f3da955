"""Automatic tags in the indexer: each version's tagger (on, off and why, or unknown), its
vocabulary embedded once per process and kept on disk, tags written with a batch, and a
changed vocabulary re-tagging the stored photos from their vectors by a plan, with no image
embedded. The text encoder is stood in for (Triton cannot run in a unit test): a vocabulary
name embeds as a fixed direction of the stand-in image encoder's space."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.embedding.arrays import Embeddings
from core.embedding.errors import ModelVersionUnavailable
from core.embedding.images import ImageLimits
from core.embedding.manifest import ModelManifest, SearchCalibration, TagCalibration
from core.jobstatus import JobStatus
from core.keywords import query_vector
from core.settings_indexer import IndexerSettings
from core.sources import LocalSource
from core.tagging.rule import TagRule, tagging_key
from core.tagging.vocabulary import load_vocabulary
from core.vectorstore import VectorStore
from core.vectorstore.base import AUTO_TAGS_FIELD, TAGGED_WITH_FIELD
from indexer.photo.autotags import Tagger, Taggers, note_off, with_tags
from indexer.photo.pipeline import embed_photos
from indexer.plan.increment import plan_keys
from indexer.plan.planner import Planned, plan_shard
from indexer.plan.shards import ShardRange
from indexer.queue.records import JobRecords
from tests.support.models import stand_in_manifest
from tests.unit.indexer.conftest import COLLECTION, DIM, PHOTOS, MeanColours

CALIBRATED = TagCalibration(threshold=-1.0, margin=-1.0, max_tags=2, enabled=True)


class Texts:
    """The text encoder stood in for: a text's vector is a seeded direction of its words
    (a name's prompts share it), and `calls` counts the requests."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, texts: list[str], version: int) -> Embeddings:
        self.calls += 1
        rows = []
        for text in texts:
            word = text.removeprefix("a photo of ").split(".")[0].split()[-1]
            rows.append(np.random.default_rng(zlib.crc32(word.encode())).normal(size=DIM))
        vectors = np.asarray(rows, dtype=np.float32)
        unit: Embeddings = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return unit


def manifest_with(tagging: TagCalibration | None) -> Callable[[int], ModelManifest]:
    def manifest(version: int) -> ModelManifest:
        if version == 9:
            raise ModelVersionUnavailable("model version 9 has no manifest")
        found = stand_in_manifest(version, DIM)
        found.calibration = SearchCalibration(tagging=tagging)
        return found

    return manifest


def vocabulary_file(folder: Path, *names: str) -> Path:
    path = folder / "vocabulary.txt"
    path.write_text("# test\n" + "\n".join(names) + "\n")
    return path


@pytest.fixture
def texts() -> Texts:
    return Texts()


def taggers_of(
    tmp_path: Path,
    texts: Texts,
    tagging: TagCalibration | None = CALIBRATED,
    **settings: object,
) -> Taggers:
    indexer = IndexerSettings(
        tag_vocabulary=vocabulary_file(tmp_path, "red", "blue", "green"), **settings
    )
    return Taggers(
        indexer, manifest=manifest_with(tagging), embed=texts, cache_dir=tmp_path / "tags"
    )


def test_a_calibrated_version_tags_with_the_key_of_its_vocabulary_and_rule(
    tmp_path: Path, texts: Texts
) -> None:
    tagger = taggers_of(tmp_path, texts)(1)
    vocabulary = load_vocabulary(tmp_path / "vocabulary.txt")
    assert tagger.on and tagger.note() is None
    assert tagger.key == tagging_key(vocabulary.digest, TagRule(-1.0, -1.0), 2)
    assert tagger.tag_vectors is not None and tagger.tag_vectors.shape == (3, DIM)
    # A photo along a tag's direction has it first; max_tags 2 keeps the best two.
    tags = tagger.tag(tagger.tag_vectors[[2, 0]])
    assert [found[0] for found in tags] == ["green", "red"]
    assert all(len(found) == 2 for found in tags)
    fields = tagger.fields(tagger.tag_vectors[:1])
    assert fields == [{AUTO_TAGS_FIELD: tags[1], TAGGED_WITH_FIELD: tagger.key}]


@pytest.mark.parametrize(
    ("tagging", "settings", "reason"),
    [
        (None, {}, "not calibrated (run photosearch model calibrate-tags --version 1)"),
        (
            CALIBRATED.model_copy(update={"enabled": False, "reason": "no better than chance"}),
            {},
            "no better than chance",
        ),
        (CALIBRATED, {"auto_tags": False}, "PHOTOSEARCH_INDEXER__AUTO_TAGS is false"),
    ],
)
def test_a_version_without_tags_stores_none_and_says_why(
    tmp_path: Path,
    texts: Texts,
    tagging: TagCalibration | None,
    settings: dict[str, object],
    reason: str,
) -> None:
    tagger = taggers_of(tmp_path, texts, tagging, **settings)(1)
    assert (tagger.key, tagger.reason) == ("", reason)
    assert tagger.note() == f"model version 1: auto tags off: {reason}"
    assert (
        tagger.fields(np.eye(2, DIM, dtype=np.float32))
        == [{AUTO_TAGS_FIELD: [], TAGGED_WITH_FIELD: ""}] * 2
    )
    assert texts.calls == 0  # nothing embedded for a version that stores none


def test_a_rule_calibrated_with_another_vocabulary_tags_and_says_to_recalibrate(
    tmp_path: Path, texts: Texts
) -> None:
    other = CALIBRATED.model_copy(update={"vocabulary_digest": "0123456789abcdef"})
    tagger = taggers_of(tmp_path, texts, other)(1)
    digest = load_vocabulary(tmp_path / "vocabulary.txt").digest
    assert tagger.on and tagger.tag_vectors is not None
    assert tagger.note() == (
        f"model version 1: auto tags: the vocabulary (digest {digest}) is not the one its rule "
        "was calibrated with (0123456789abcdef): run photosearch model calibrate-tags "
        "--version 1 with it for a rule and figures that hold"
    )
    same = CALIBRATED.model_copy(update={"vocabulary_digest": digest})
    assert taggers_of(tmp_path, texts, same)(1).note() is None


def test_a_tagger_that_cannot_tell_keeps_what_is_stored(tmp_path: Path, texts: Texts) -> None:
    taggers = taggers_of(tmp_path, texts)
    assert taggers(9).key is None and "no manifest" in taggers(9).reason
    (tmp_path / "vocabulary.txt").write_text("# nothing but a comment\n")
    unreadable = taggers(1)
    assert unreadable.key is None and "names no tag" in unreadable.reason


def test_the_vocabulary_is_embedded_once_per_process_and_kept_on_disk(
    tmp_path: Path, texts: Texts
) -> None:
    taggers = taggers_of(tmp_path, texts)
    first = taggers(1)
    made = texts.calls
    assert made > 0
    assert taggers(1).tag_vectors is first.tag_vectors and texts.calls == made
    # Another worker process (a new Taggers) reads the file instead of asking Triton.
    again = taggers_of(tmp_path, texts)(1)
    assert texts.calls == made
    assert again.tag_vectors is not None and first.tag_vectors is not None
    np.testing.assert_array_equal(again.tag_vectors, first.tag_vectors)
    assert len(list((tmp_path / "tags").glob("m1-*.npy"))) == 1
    # An edited file is read at the next call: another key, embedded again.
    vocabulary_file(tmp_path, "red", "yellow")
    changed = taggers(1)
    assert changed.key != first.key and changed.names == ("red", "yellow")
    assert texts.calls > made
    # The description asks no Triton.
    assert taggers.describe(1).key == changed.key and taggers.describe(1).tag_vectors is None


def test_the_job_record_says_once_that_a_version_stores_no_tags(
    tmp_path: Path, texts: Texts, records: JobRecords, job: JobStatus
) -> None:
    taggers = taggers_of(tmp_path, texts, None)
    note_off(records.jobs, job.id, taggers, 2)
    note_off(records.jobs, job.id, taggers, 2)
    assert records.jobs.problems(job.id) == [
        "model version 2: auto tags off: not calibrated (run photosearch model calibrate-tags "
        "--version 2)"
    ]
    note_off(records.jobs, job.id, taggers_of(tmp_path, texts), 1)  # on: nothing to say
    assert len(records.jobs.problems(job.id)) == 1


Index = Callable[[Tagger], None]
Plan = Callable[..., Planned]


@pytest.fixture
def plan(
    job: JobStatus,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    readers: ThreadPoolExecutor,
    settings: IndexerSettings,
) -> Plan:
    """The folder's shard planned, with the automatic `taggers` given (None: none)."""

    def run(taggers: Callable[[int], Tagger] | None = None) -> Planned:
        return plan_shard(
            job,
            ShardRange(""),
            source=source,
            store=store,
            records=records,
            readers=readers,
            settings=settings,
            worker="w1",
            taggers=taggers,
        )

    return run


@pytest.fixture
def index(
    plan: Plan,
    source: LocalSource,
    store: VectorStore,
    readers: ThreadPoolExecutor,
) -> Index:
    """The folder planned and its batches embedded and tagged, as the tasks would."""

    def run(tagger: Tagger) -> None:
        planned = plan()
        photos = [photo for batch in planned.batches for photo in batch.photos]
        embed_photos(
            photos,
            collection=COLLECTION,
            model_version=1,
            source=source,
            store=store,
            embedder=MeanColours(),
            readers=readers,
            limits=ImageLimits(),
            cpu_chunk=4,
            duplicate_threshold=0.9999,
            tagger=tagger,
        )

    return run


def tagger(key: str, *names: str) -> Tagger:
    """A tagger of the stand-in encoder's space: each name a fixed direction; every tag
    passes (the rule lets all through), the best two kept."""
    vectors = Texts()([f"a photo of {name}." for name in names], 1)
    return Tagger(1, key, names=names, tag_vectors=vectors, rule=TagRule(-1, -1), max_tags=2)


def stored_tags(store: VectorStore) -> dict[str, tuple[list[str], str]]:
    found = store.retrieve(COLLECTION, [p.photo_id for p in store.points(COLLECTION)])
    return {
        p.photo_id: (p.payload.get(AUTO_TAGS_FIELD, []), p.payload.get(TAGGED_WITH_FIELD, ""))
        for p in found
    }


def test_a_batch_stores_each_photo_s_tags_and_a_changed_vocabulary_re_tags_by_a_plan(
    plan: Plan, store: VectorStore, index: Index
) -> None:
    first = tagger("k1", "red", "blue", "green")
    index(first)
    tagged = stored_tags(store)
    assert len(tagged) == PHOTOS
    assert all(key == "k1" and len(tags) == 2 for tags, key in tagged.values())
    assert all(set(tags) <= {"red", "blue", "green"} for tags, _ in tagged.values())
    # Planned again with the same tagger: nothing to do.
    again = plan(lambda version: first)
    assert again.counts["unchanged"] == PHOTOS and again.record["changes"] == 0
    # Another vocabulary: every photo re-tagged from its stored vector, no batch to embed.
    second = tagger("k2", "cyan", "magenta", "yellow")
    planned = plan(lambda version: second)
    assert isinstance(planned, Planned) and planned.batches == []
    assert planned.record["changes"] == PHOTOS
    retagged = stored_tags(store)
    assert all(key == "k2" for _, key in retagged.values())
    assert all(set(tags) <= {"cyan", "magenta", "yellow"} for tags, _ in retagged.values())
    stored = store.retrieve(COLLECTION, list(retagged), with_vectors=True)
    vectors = {p.photo_id: p.vector for p in stored}
    for photo_id, (tags, _) in retagged.items():
        vector = vectors[photo_id]
        assert vector is not None and tags == second.tag(vector[None, :])[0]
    # The payload write rewrote the keywords vectors: the new tags' words are found, the old
    # ones' no more.
    for word in ("cyan", "magenta", "yellow"):
        hits = store.keyword_search(COLLECTION, query_vector(word), limit=PHOTOS)
        holding = {pid for pid, (tags, _) in retagged.items() if word in tags}
        assert {hit.photo_id for hit in hits} == holding
    assert store.keyword_search(COLLECTION, query_vector("red blue green"), limit=PHOTOS) == []


def test_a_payload_write_keeps_tags_where_the_tagger_cannot_tell(
    store: VectorStore, index: Index
) -> None:
    first = tagger("k1", "red", "blue")
    index(first)
    before = stored_tags(store)
    ids = list(before)[:2]
    unknown = Tagger(1, None, "the vocabulary names no tag")
    kept = with_tags(store, COLLECTION, unknown, {pid: {"title": "x"} for pid in ids})
    assert {pid: (p[AUTO_TAGS_FIELD], p[TAGGED_WITH_FIELD]) for pid, p in kept.items()} == {
        pid: before[pid] for pid in ids
    }
    off = with_tags(store, COLLECTION, Tagger(1, "", "off"), {ids[0]: {"title": "x"}})
    assert off == {ids[0]: {"title": "x", AUTO_TAGS_FIELD: [], TAGGED_WITH_FIELD: ""}}
    gone = with_tags(store, COLLECTION, first, {"no-such-photo": {}})
    assert gone == {"no-such-photo": {AUTO_TAGS_FIELD: [], TAGGED_WITH_FIELD: ""}}


def test_logged_keys_replayed_into_a_following_collection_are_re_tagged_with_its_version(
    job: JobStatus,
    source: LocalSource,
    store: VectorStore,
    records: JobRecords,
    readers: ThreadPoolExecutor,
    settings: IndexerSettings,
    index: Index,
) -> None:
    index(tagger("k1", "red", "blue"))
    keys = sorted(p.key for p in store.points(COLLECTION))[:2]
    # The version of the collection the keys replay into tags with another vocabulary.
    follower = tagger("k2", "cyan", "magenta")
    planned = plan_keys(
        job,
        "replay:0",
        keys,
        source=source,
        store=store,
        records=records,
        readers=readers,
        settings=settings,
        worker="w1",
        started=0.0,
        taggers=lambda version: follower,
    )
    assert planned.batches == [] and planned.record["changes"] == 2
    tags = stored_tags(store)
    replayed = {p.photo_id for p in store.points(COLLECTION) if p.key in keys}
    assert {pid for pid, (_, key) in tags.items() if key == "k2"} == replayed
    assert all(set(tags[pid][0]) <= {"cyan", "magenta"} for pid in replayed)
