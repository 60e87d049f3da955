"""The diff of one shard: listed photos against the points that stream past them."""

from __future__ import annotations

from core.vectorstore import IndexedPoint
from indexer.photo.skips import Skipped
from indexer.plan.catalog import Catalog, Photo
from indexer.plan.diff import Action, ShardDiff, ShardPlan, classify, resolve

LABEL = "a"


def photo(photo_id: str, version: str = "v1", meta_hash: str = "", key: str = "") -> Photo:
    return Photo(photo_id, key or f"{photo_id}.jpg", version, meta_hash)


def point(photo_id: str, version: str = "v1", meta_hash: str = "", **kw: str) -> IndexedPoint:
    key = kw.get("key", f"{photo_id}.jpg")
    return IndexedPoint(photo_id, key, version, meta_hash, kw.get("shard", LABEL))


def catalog_of(*photos: Photo, rejected: dict[str, tuple[str, str]] | None = None) -> Catalog:
    return Catalog("file:///x", {p.photo_id: p for p in photos}, dict(rejected or {}))


def diff(
    catalog: Catalog, points: list[IndexedPoint], skipped: Skipped | None = None
) -> tuple[ShardPlan, list[str]]:
    shard = ShardDiff(catalog, skipped or {}, LABEL)
    gone = [p.photo_id for p in points if shard.see(p)]
    return shard.finish(), gone


def test_a_shard_diff_sorts_new_changed_payload_only_gone_and_unchanged() -> None:
    catalog = catalog_of(
        photo("same", "v1", "m1"),
        photo("changed", "v2", "m1"),
        photo("retitled", "v1", "m2"),
        photo("moved", "v1", "", key="new/moved.jpg"),
        photo("new", "v1"),
        rejected={"notes.txt": ("v1", "unsupported file type .txt")},
    )
    points = [
        point("same", "v1", "m1"),
        point("changed", "v1", "m1"),
        point("retitled", "v1", "m1"),
        point("moved", "v1", ""),  # same file version, another key: the payload follows
        point("deleted", "v1", ""),
    ]
    plan, gone = diff(catalog, points)
    assert [p.photo_id for p in plan.embed] == ["changed"]
    assert sorted(p.photo_id for p in plan.payload) == ["moved", "retitled"]
    assert gone == ["deleted"]
    # Listed with no point in this shard: the planner looks these up across the collection.
    assert [p.photo_id for p in plan.unmatched] == ["new"]
    assert plan.rejected == {"notes.txt": ("v1", "unsupported file type .txt")}
    assert (plan.unchanged, plan.known_bad, plan.forget) == (1, 0, [])


def test_a_point_labelled_with_another_shard_is_rewritten() -> None:
    assert classify(photo("x"), point("x", shard="b"), LABEL, None) == Action.PAYLOAD
    assert classify(photo("x"), point("x"), LABEL, None) == Action.UNCHANGED
    assert classify(photo("x", "v2"), point("x", shard="b"), LABEL, None) == Action.EMBED
    assert classify(photo("x"), None, LABEL, None) == Action.EMBED


def test_known_bad_photos_are_not_retried_until_their_version_changes() -> None:
    rejected = {"notes.txt": ("v1", "unsupported file type .txt")}
    skipped = {"broken.jpg": ("v1", "truncated"), "notes.txt": ("v1", "unsupported")}
    plan, _ = diff(catalog_of(photo("broken", "v1"), rejected=rejected), [], skipped)
    assert plan.rejected == {} and plan.known_bad == 1
    [unmatched] = plan.unmatched
    assert resolve(unmatched, None, LABEL, "v1", False) == Action.KNOWN_BAD
    rejected = {"notes.txt": ("v2", "unsupported file type .txt")}
    plan, _ = diff(catalog_of(photo("broken", "v2"), rejected=rejected), [], skipped)
    assert plan.rejected == rejected and plan.known_bad == 0
    assert resolve(plan.unmatched[0], None, LABEL, "v1", False) == Action.EMBED


def test_a_changed_file_known_bad_at_its_new_version_keeps_its_old_point() -> None:
    plan, gone = diff(catalog_of(photo("a", "v2")), [point("a", "v1")], {"a.jpg": ("v2", "bad")})
    assert (plan.embed, gone, plan.known_bad) == ([], [], 1)


def test_skip_records_of_files_gone_from_the_shard_are_forgotten() -> None:
    rejected = {"notes.txt": ("v1", "unsupported file type .txt")}
    skipped = dict.fromkeys(("kept.jpg", "notes.txt", "vanished.jpg", "old.txt"), ("v1", "bad"))
    plan, _ = diff(catalog_of(photo("kept", "v1"), rejected=rejected), [], skipped)
    assert sorted(plan.forget) == ["old.txt", "vanished.jpg"]


def test_an_id_found_elsewhere_is_a_move_or_another_photo_s_id() -> None:
    new = photo("x", "v1", key="b/x.jpg")
    elsewhere = point("x", "v1", key="a/x.jpg", shard="a")
    # Its old file is gone: the photo moved; the same version only needs its payload.
    assert resolve(new, elsewhere, "b", None, other_there=False) == Action.PAYLOAD
    assert resolve(photo("x", "v2", key="b/x.jpg"), elsewhere, "b", None, False) == Action.EMBED
    # Another file that is still there has the id: the smaller key keeps it.
    assert resolve(new, elsewhere, "b", None, other_there=True) is None
    smaller = photo("x", "v9", key="0/x.jpg")
    assert resolve(smaller, elsewhere, "0", None, other_there=True) == Action.EMBED


def test_a_point_tagged_with_another_vocabulary_is_rewritten_not_embedded() -> None:
    tagged = IndexedPoint("x", "x.jpg", "v1", "", LABEL, auto_tags_vocabulary="k1")
    assert classify(photo("x"), tagged, LABEL, None, "k1") == Action.UNCHANGED
    assert classify(photo("x"), tagged, LABEL, None, "k2") == Action.PAYLOAD
    assert classify(photo("x"), tagged, LABEL, None, "") == Action.PAYLOAD  # tags turned off
    assert classify(photo("x"), tagged, LABEL, None) == Action.UNCHANGED  # not compared
    assert classify(photo("x", "v2"), tagged, LABEL, None, "k2") == Action.EMBED
    # A point of before automatic tags, its version now storing none: nothing to do.
    assert classify(photo("x"), point("x"), LABEL, None, "") == Action.UNCHANGED
    assert resolve(photo("x"), tagged, LABEL, None, False, "k2") == Action.PAYLOAD
    catalog = catalog_of(photo("x"))
    shard = ShardDiff(catalog, {}, LABEL, "k2")
    shard.see(tagged)
    assert [p.photo_id for p in shard.finish().payload] == ["x"]
