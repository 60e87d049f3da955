"""bench_precision's choice of versions: one per precision, never one with an encoder that fell
back to fp32 (it would time fp32 under the other precision's name)."""

from __future__ import annotations

from pathlib import Path

from core.embedding.manifest import EncoderFallback, write_manifest
from loadtests.bench_precision import ensure_versions
from tests.support.models import stand_in_manifest


def test_a_version_with_a_fallen_back_encoder_is_not_timed_as_its_precision(
    tmp_path: Path,
) -> None:
    fallback = EncoderFallback(encoder="image", wanted="int8", cosine=0.98, floor=0.99)
    uniform = stand_in_manifest(1, 8).model_copy(
        update={"precision": "int8", "image_precision": "int8", "text_precision": "int8"}
    )
    # The newer int8 version, but its image encoder serves fp32.
    mixed = stand_in_manifest(2, 8).model_copy(
        update={"precision": "int8", "text_precision": "int8", "fallbacks": [fallback]}
    )
    for manifest in (uniform, mixed, stand_in_manifest(3, 8)):
        write_manifest(tmp_path, manifest)
    # Both are there already: nothing is exported.
    assert ensure_versions(tmp_path, "stand-in", ["int8", "fp32"]) == {"int8": 1, "fp32": 3}
