"""The exported ONNX encoders against open_clip's PyTorch model, and the repository layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from core.embedding.arrays import row_cosines
from core.embedding.manifest import (
    IMAGE_MODEL,
    TEXT_MODEL,
    ModelManifest,
    list_versions,
    load_manifest,
    sha256_file,
)
from core.embedding.tokenizer import ClipTokenizer, pad_batch
from model.export import export_model
from model.export_errors import ExportError
from model.repository import version_dir
from tests.support.models import TINY_CONFIG


def _session(repository: Path, name: str, version: int = 1) -> ort.InferenceSession:
    path = version_dir(repository, name, version) / "model.onnx"
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_image_encoder_matches_pytorch_on_random_pixels(
    repository: Path, reference_clip: Any, manifest: ModelManifest
) -> None:
    rng = np.random.default_rng(7)
    size = manifest.image.size
    pixels = rng.integers(0, 256, (5, size, size, 3), dtype=np.uint8)
    onnx_out = _session(repository, IMAGE_MODEL).run(None, {"image": pixels})[0]
    x = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255.0
    x = (x - torch.tensor(manifest.image.mean).view(1, 3, 1, 1)) / torch.tensor(
        manifest.image.std
    ).view(1, 3, 1, 1)
    with torch.no_grad():
        ref = reference_clip.encode_image(x, normalize=True).numpy()
    assert onnx_out.shape == (5, manifest.embedding_dim)
    assert row_cosines(onnx_out, ref).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(onnx_out, axis=1), 1.0, atol=1e-5)


def test_text_encoder_matches_pytorch_on_random_tokens(
    repository: Path, reference_clip: Any, manifest: ModelManifest
) -> None:
    rng = np.random.default_rng(8)
    eot = manifest.tokenizer.eot_id
    tokens = np.zeros((6, manifest.tokenizer.context_length), dtype=np.int64)
    for row, length in enumerate((2, 5, 16, 33, 60, 77)):
        tokens[row, :length] = rng.integers(1, eot, length)
        tokens[row, 0] = manifest.tokenizer.sot_id
        tokens[row, length - 1] = eot
    onnx_out = _session(repository, TEXT_MODEL).run(None, {"input_ids": tokens})[0]
    with torch.no_grad():
        ref = reference_clip.encode_text(torch.from_numpy(tokens), normalize=True).numpy()
    assert row_cosines(onnx_out, ref).min() >= 0.9999


def test_padding_to_the_longest_query_equals_padding_to_77(
    repository: Path, reference_clip: Any, manifest: ModelManifest
) -> None:
    tokenizer = ClipTokenizer.from_repository(repository, 1)
    queries = ["cat", "a red bicycle against a brick wall", "sunset over the sea, 35mm film", ""]
    ids = tokenizer.encode_batch(queries)
    full = pad_batch(ids, multiple=77, context_length=77)
    session = _session(repository, TEXT_MODEL)
    at_77 = session.run(None, {"input_ids": full})[0]
    longest = max(len(row) for row in ids)
    at_longest = session.run(None, {"input_ids": full[:, :longest]})[0]
    at_multiple_of_8 = session.run(None, {"input_ids": pad_batch(ids, 8, 77)})[0]
    assert full[:, :longest].shape[1] < 77
    np.testing.assert_allclose(at_longest, at_77, atol=1e-5)
    np.testing.assert_allclose(at_multiple_of_8, at_77, atol=1e-5)
    # And the reference: open_clip's own encode_text at 77 tokens.
    with torch.no_grad():
        ref = reference_clip.encode_text(torch.from_numpy(full), normalize=True).numpy()
    assert row_cosines(at_longest, ref).min() >= 0.9999


def test_manifest_records_the_version(
    repository: Path, manifest: ModelManifest, checkpoint: Path
) -> None:
    assert manifest.version == 1
    assert manifest.arch == str(TINY_CONFIG)
    assert manifest.arch_config["embed_dim"] == manifest.embedding_dim == 32
    assert manifest.weights == str(checkpoint.resolve())
    assert manifest.weights_sha256 == sha256_file(checkpoint)
    assert manifest.image.size == 32
    assert manifest.tokenizer.context_length == 77
    assert manifest.exported_at.startswith("20")
    assert set(manifest.files) == {
        "clip_image/1/model.onnx",
        "clip_text/1/model.onnx",
        "clip_text/1/tokenizer.json",
    }
    for relative, digest in manifest.files.items():
        assert sha256_file(repository / relative) == digest
    assert float(manifest.exporter["parity_image"]) >= 0.9999
    assert float(manifest.exporter["parity_text"]) >= 0.9999


def test_next_export_adds_a_version_and_keeps_the_old(tmp_path: Path, repository: Path) -> None:
    repo = tmp_path / "models"
    first = export_model(str(TINY_CONFIG), "none", repo, target="gpu")
    old_digest = sha256_file(version_dir(repo, IMAGE_MODEL, 1) / "model.onnx")
    second = export_model(str(TINY_CONFIG), "none", repo)
    assert (first.version, second.version) == (1, 2)
    assert list_versions(repo) == [1, 2]
    assert sha256_file(version_dir(repo, IMAGE_MODEL, 1) / "model.onnx") == old_digest
    assert load_manifest(repo, 1).random_weights
    # The repository-wide config follows the latest target; every version gets the CPU runner.
    for version in (1, 2):
        for name in (IMAGE_MODEL, TEXT_MODEL):
            assert (version_dir(repo, name, version) / "model.py").is_file()
    with pytest.raises(ExportError, match="already exists"):
        export_model(str(TINY_CONFIG), "none", repo, version=2)


def test_bad_arch_and_weights_are_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="unknown architecture"):
        export_model("No-Such-Arch", "none", tmp_path)
    with pytest.raises(ExportError, match="neither a file nor a tag"):
        export_model(str(TINY_CONFIG), "no-such-tag", tmp_path)
    assert list_versions(tmp_path) == []
