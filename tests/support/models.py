"""The tiny CLIP the tests export and serve, with deterministic random weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
