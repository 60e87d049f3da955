"""The tiny CLIP the tests export and serve, with deterministic random weights, and the
manifest of a model a unit test stands in for."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from core.embedding.manifest import ImagePreprocessing, ModelManifest, TokenizerSpec

TINY_CONFIG = Path(__file__).parent.parent / "data" / "tiny-clip.json"
# The session Triton's model-control key, as PHOTOSEARCH_TRITON__CONTROL_KEY would give it.
TRITON_CONTROL_KEY = "session-triton-control-key"


def tiny_clip(seed: int) -> Any:
    """The tiny test architecture with deterministic random weights (open_clip, PyTorch)."""
    import torch

    from model.onnx_export import import_open_clip

    open_clip = import_open_clip()
    open_clip.add_model_config(TINY_CONFIG)
    torch.manual_seed(seed)
    clip = open_clip.create_model(TINY_CONFIG.stem, pretrained=None)
    return clip.eval()


def stand_in_manifest(
    version: int,
    dim: int,
    *,
    arch: str = "stand-in",
    weights: str = "random",
    target: Literal["cpu", "gpu"] = "cpu",
) -> ModelManifest:
    """The manifest of a model no test exports: an encoder stood in for, `dim` wide, of
    16-pixel images and 8-token texts."""
    return ModelManifest(
        version=version,
        arch=arch,
        arch_config={},
        weights=weights,
        embedding_dim=dim,
        image=ImagePreprocessing(size=16, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
        tokenizer=TokenizerSpec(context_length=8),
        target=target,
        files={},
        exported_at="2026-01-01T00:00:00+00:00",
        exporter={},
    )
