"""bench_attributes at a tiny size: its photos decode both ways, the same attributes come out
of the timed decodes, and the table has a row per size. Nothing is timed against a bound."""

from __future__ import annotations

import numpy as np
import pytest

from core.embedding.attributes import FIELDS
from core.embedding.images import prepare_image, prepare_photo
from loadtests import bench_attributes


def test_the_synthetic_photos_decode_both_ways_to_the_same_pixels() -> None:
    data = bench_attributes.synthetic_jpeg((300, 200), np.random.default_rng(1))
    pixels, attributes = prepare_photo(data, bench_attributes.SPEC)
    assert np.array_equal(pixels, prepare_image(data, bench_attributes.SPEC))
    assert set(attributes) == set(FIELDS) and attributes["orientation"] == "landscape"


def test_a_run_prints_a_row_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    bench_attributes.main(["--sizes", "120x80,80x120", "--count", "2", "--decodes", "4"])
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "JPEG" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| 120x80 JPEG", "| 80x120 JPEG"]
    for row in rows:
        cells = row.strip("|").split(" | ")
        assert float(cells[2]) > 0 and float(cells[3]) > 0  # mean microseconds, each way
    assert "visual_attributes alone" in printed
