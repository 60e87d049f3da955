"""The capacity model: what it counts in memory and on disk by the collection's layout, and the
figures docs/capacity-plan.md shows are the ones it computes."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import QdrantSettings
from core.vectorstore.footprint import (
    WAL_BYTES,
    Layout,
    capacity_section,
    during_build,
    footprint,
    graph_bytes_per_point,
    layout_of,
)

DOC = Path(__file__).parents[3] / "docs" / "capacity-plan.md"
START, END = "<!-- footprint:start -->\n", "\n<!-- footprint:end -->"


def parts(memory: bool, points: int, layout: Layout) -> dict[str, float]:
    f = footprint(points, 512, layout)
    return {p.name: p.memory_bytes if memory else p.disk_bytes for p in f.parts}


def test_each_part_grows_with_the_photos_and_the_copies_but_the_wal_with_the_shards() -> None:
    one, two = Layout(), Layout(copies=2, shards=3)
    small, large = footprint(1000, 512, one), footprint(2000, 512, one)
    wal = WAL_BYTES
    assert large.disk_bytes - wal == pytest.approx(2 * (small.disk_bytes - wal))
    assert large.memory_bytes == pytest.approx(2 * small.memory_bytes)
    copied = footprint(1000, 512, two)
    assert copied.memory_bytes == pytest.approx(2 * small.memory_bytes)
    assert copied.disk_bytes - 6 * wal == pytest.approx(2 * (small.disk_bytes - wal))


def test_the_originals_are_in_memory_only_off_disk_or_without_int8_copies() -> None:
    name = "original vectors (float32)"
    assert parts(True, 1000, Layout())[name] == 0
    assert parts(False, 1000, Layout())[name] == 1000 * 512 * 4
    assert parts(True, 1000, Layout(originals_in_ram=True))[name] == 1000 * 512 * 4
    without = parts(True, 1000, Layout(quantization=False))
    assert without[name] == 1000 * 512 * 4 and without["int8 copies"] == 0
    assert parts(True, 1000, Layout())["payload"] == 0 < parts(False, 1000, Layout())["payload"]


def test_the_graph_grows_with_m_and_the_build_rewrites_its_share_of_the_disk() -> None:
    assert graph_bytes_per_point(32) > graph_bytes_per_point(16) > graph_bytes_per_point(8)
    collection = footprint(1000, 512, Layout(build_headroom=0.25))
    built = during_build(collection, Layout(build_headroom=0.25))
    assert built.disk_bytes == pytest.approx(collection.disk_bytes * 1.25)
    assert built.memory_bytes == collection.memory_bytes


def test_the_layout_follows_the_settings_of_each_engine() -> None:
    edge = layout_of(QdrantSettings(hnsw_m=8))
    assert (edge.m, edge.copies, edge.shards, edge.build_headroom) == (8, 1, 1, 1.0)
    server = layout_of(QdrantSettings(url="http://qdrant:6333", on_disk=False))
    assert (server.copies, server.shards, server.originals_in_ram) == (2, 6, True)
    assert server.build_headroom < 1


def test_the_capacity_plan_shows_the_figures_the_model_computes() -> None:
    text = DOC.read_text(encoding="utf-8")
    shown = text.partition(START)[2].partition(END)[0]
    assert shown == capacity_section(100_000_000, 512, 3), (
        "docs/capacity-plan.md is stale: paste `python -m core.vectorstore.footprint` between "
        f"{START.strip()} and {END.strip()}"
    )
