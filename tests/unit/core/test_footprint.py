"""The capacity model: what it counts in memory and on disk by the collection's layout, and the
figures docs/capacity-plan.md shows are the ones it computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import QdrantSettings
from core.vectorstore.footprint import (
    BENCH_KEY_CHARS,
    GRAPH,
    HEAP_PER_DISK_BYTE,
    ID_TRACKER,
    INDEXES,
    KEYWORDS_INDEX,
    KEYWORDS_VECTORS,
    NODE_DISK_GIB,
    NODE_DISK_SHARE,
    NODE_MEMORY_BUDGET_GIB,
    NODES,
    PAYLOAD,
    RESIDENT,
    RESIDENT_INDEXES,
    RESIDENT_OTHER_INDEX,
    SUBGRAPH_BASE,
    SUBGRAPH_PER_M,
    TURBO4_EXTRA,
    WAL_BYTES,
    Footprint,
    GiB,
    Layout,
    Part,
    capacity_section,
    during_build,
    footprint,
    layout_of,
    quantized_bytes,
)
from core.vectorstore.schema import PAYLOAD_INDEXES, CollectionSchema, FieldIndex, Tier

DOC = Path(__file__).parents[3] / "docs" / "capacity-plan.md"
START, END = "<!-- footprint:start -->\n", "\n<!-- footprint:end -->"


def by_name(f: Footprint) -> dict[str, Part]:
    return {p.name.partition(" (")[0]: p for p in f.parts}


def test_the_model_is_its_constants_times_the_photos_by_hand() -> None:
    f = footprint(1000, 512, Layout(), key_chars=BENCH_KEY_CHARS)
    indexes = sum(INDEXES.values())
    # Each index at its own resident share, the color_shares' 12 as one.
    indexes_resident = sum(
        size * RESIDENT_INDEXES.get(name, RESIDENT_OTHER_INDEX) for name, size in INDEXES.items()
    )
    # The main graph and created_at's payload subgraph at the shipped degree.
    graph = GRAPH + SUBGRAPH_BASE + SUBGRAPH_PER_M * CollectionSchema().subgraph_m
    pinned = 1000 * ((256 + TURBO4_EXTRA) + graph)
    cold_disk = {
        "original vectors": 2 * 512,
        "keywords index": KEYWORDS_INDEX,
        "id tracker": ID_TRACKER,
        "payload": PAYLOAD,
    }
    cold = 1000 * (sum(n * RESIDENT[part] for part, n in cold_disk.items()) + indexes_resident)
    assert f.memory_of(Tier.PINNED) == pytest.approx(pinned)
    assert f.memory_of(Tier.CACHED) == 0
    # The rule counts pinned (and cached) parts; the cold parts' resident pages are apart.
    assert f.memory_bytes == pytest.approx(pinned)
    assert f.memory_of(Tier.COLD) == f.cache_bytes == pytest.approx(cold)
    disk = 1000 * (
        sum(cold_disk.values()) + indexes + 256 + TURBO4_EXTRA + graph + KEYWORDS_VECTORS
    )
    assert f.disk_bytes == pytest.approx(disk + WAL_BYTES)


def test_each_part_grows_with_the_photos_and_the_copies_but_the_wal_with_the_shards() -> None:
    one, two = Layout(), Layout(copies=2, shards=3)
    small, large = footprint(1000, 512, one), footprint(2000, 512, one)
    wal = WAL_BYTES
    assert large.disk_bytes - wal == pytest.approx(2 * (small.disk_bytes - wal))
    assert large.memory_bytes == pytest.approx(2 * small.memory_bytes)
    copied = footprint(1000, 512, two)
    assert copied.memory_bytes == pytest.approx(2 * small.memory_bytes)
    assert copied.disk_bytes - 6 * wal == pytest.approx(2 * (small.disk_bytes - wal))


def test_a_part_is_counted_by_its_tier() -> None:
    shipped = by_name(footprint(1000, 512, Layout()))
    assert shipped["quantized copies"].memory_bytes == shipped["quantized copies"].disk_bytes
    originals = shipped["original vectors"]
    assert originals.tier == Tier.COLD and originals.memory_bytes == 0
    share = RESIDENT["original vectors"]
    assert originals.cache_bytes == pytest.approx(originals.disk_bytes * share)
    # Cached: read in whole at start.
    cached = by_name(footprint(1000, 512, Layout(CollectionSchema(originals=Tier.CACHED))))
    assert cached["original vectors"].memory_bytes == cached["original vectors"].disk_bytes
    # int8 copies and float32 originals, as before the tiers.
    int8 = CollectionSchema(quantizer="int8", datatype="float32")
    old = by_name(footprint(1000, 512, Layout(int8)))
    assert old["quantized copies"].memory_bytes == 1000 * (512 + 4)
    assert old["original vectors"].disk_bytes == 1000 * 512 * 4
    # What every search walks counts whole, whatever its tier.
    cold = CollectionSchema(quantized=Tier.COLD, graph=Tier.COLD)
    walked = by_name(footprint(1000, 512, Layout(cold)))
    assert walked["quantized copies"].memory_bytes == 1000 * (256 + TURBO4_EXTRA)
    graph = GRAPH + SUBGRAPH_BASE + SUBGRAPH_PER_M * CollectionSchema().subgraph_m
    assert walked["HNSW graph"].memory_bytes == pytest.approx(1000 * graph)
    # A pinned payload index is a structure on the heap.
    pinned = {"tags": FieldIndex("keyword", Tier.PINNED)}
    heap = by_name(footprint(1000, 512, Layout(indexes=pinned)))["payload indexes"]
    assert heap.memory_bytes == pytest.approx(1000 * INDEXES["tags"] * HEAP_PER_DISK_BYTE)


def test_a_payload_subgraph_adds_its_links_and_m_scales_the_main_graph() -> None:
    none = CollectionSchema(subgraph_m=0)
    main = by_name(footprint(1000, 512, Layout(none)))["HNSW graph"]
    assert main.memory_bytes == pytest.approx(1000 * GRAPH)
    # created_at's, at each degree measured (flat clusters): the line through them.
    for m, measured in ((4, 33.3), (6, 49.8)):
        shipped = by_name(footprint(1000, 512, Layout(CollectionSchema(subgraph_m=m))))
        added = shipped["HNSW graph"].memory_bytes - main.memory_bytes
        assert added == pytest.approx(1000 * (SUBGRAPH_BASE + SUBGRAPH_PER_M * m))
        assert added == pytest.approx(1000 * measured, rel=0.001)
    two = {**PAYLOAD_INDEXES, "license": FieldIndex("keyword", subgraph=True)}
    both = by_name(footprint(1000, 512, Layout(indexes=two)))["HNSW graph"]
    one = by_name(footprint(1000, 512, Layout()))["HNSW graph"]
    assert both.memory_bytes - one.memory_bytes == pytest.approx(
        one.memory_bytes - main.memory_bytes
    )
    wide = by_name(footprint(1000, 512, Layout(CollectionSchema(hnsw_m=32, subgraph_m=0))))
    assert wide["HNSW graph"].memory_bytes == pytest.approx(2 * main.memory_bytes)


def test_the_build_rewrites_its_share_of_the_disk_and_no_memory() -> None:
    collection = footprint(1000, 512, Layout(build_headroom=0.25))
    built = during_build(collection, Layout(build_headroom=0.25))
    assert built.disk_bytes == pytest.approx(collection.disk_bytes * 1.25)
    assert built.memory_bytes == collection.memory_bytes


def test_the_layout_follows_the_settings_of_each_engine() -> None:
    edge = layout_of(QdrantSettings(hnsw_m=8))
    assert (edge.schema.hnsw_m, edge.copies, edge.shards, edge.build_headroom) == (8, 1, 1, 1.0)
    server = layout_of(QdrantSettings(url="http://qdrant:6333", on_disk=False, quantizer="int8"))
    assert (server.copies, server.shards, server.schema.originals) == (2, 6, Tier.CACHED)
    assert server.schema.quantizer == "int8" and server.build_headroom < 1


def test_1e8_photos_live_and_reindexed_fit_three_nodes_of_64_gib_by_the_rule() -> None:
    settings = QdrantSettings(url="http://qdrant:6333")
    layout = layout_of(settings)
    live = footprint(100_000_000, 512, layout)
    new = during_build(footprint(100_000_000, 512, layout), layout)
    per_node = (live.memory_bytes + new.memory_bytes) / NODES
    assert per_node <= NODE_MEMORY_BUDGET_GIB * GiB
    assert (live.disk_bytes + new.disk_bytes) / NODES <= NODE_DISK_SHARE * NODE_DISK_GIB * GiB
    # The quantized copies take at most 300 B a photo, and at most 3 fields build a subgraph.
    assert quantized_bytes(512, layout.schema) <= 300
    assert [f for f, index in layout.indexes.items() if index.subgraph] == ["created_at"]


def test_the_capacity_plan_shows_the_figures_the_model_computes() -> None:
    text = DOC.read_text(encoding="utf-8")
    shown = text.partition(START)[2].partition(END)[0]
    assert shown == capacity_section(100_000_000, 512, 3), (
        "docs/capacity-plan.md is stale: paste `python -m core.vectorstore.footprint` between "
        f"{START.strip()} and {END.strip()}"
    )
