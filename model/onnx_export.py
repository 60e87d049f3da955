"""open_clip -> two ONNX graphs, each checked against PyTorch with onnxruntime (imports torch)."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import onnxruntime as ort
import torch
from torch import nn

from core.embedding.arrays import AnyArray, row_cosines
from core.embedding.manifest import IMAGE_INPUT, IMAGE_OUTPUT, TEXT_INPUT, TEXT_OUTPUT
from model.encoders import ImageEncoder

PARITY_MIN_COSINE = 0.9999
_TWO_GB = 2**31
_torchvision_schemas: Any = None


def import_open_clip() -> ModuleType:
    """Import open_clip, surviving a CUDA torchvision beside a CPU torch.

    PyPI's torchvision is a CUDA build; next to the CPU torch its extension fails to load and
    its Python side then dies registering fakes for `torchvision::nms`. Export never runs
    those ops, so defining the two schemas lets the import finish.
    """
    global _torchvision_schemas
    try:
        import torchvision  # type: ignore[import-untyped]  # noqa: F401
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        _torchvision_schemas = torch.library.Library("torchvision", "DEF")  # type: ignore[no-untyped-call]
        _torchvision_schemas.define(
            "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
        )
        _torchvision_schemas.define(
            "qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor"
        )
    import open_clip

    return open_clip  # type: ignore[no-any-return]


@dataclass
class Parity:
    """Lowest cosine between onnxruntime and open_clip's PyTorch model on random inputs."""

    image: float
    text: float


def export_image_encoder(encoder: ImageEncoder, image_size: int, path: Path) -> None:
    """uint8 [batch, H, W, 3] -> float32 [batch, D], dynamic batch."""
    from torch.export import Dim

    example = torch.zeros((2, image_size, image_size, 3), dtype=torch.uint8)
    _export(encoder, example, path, IMAGE_INPUT, IMAGE_OUTPUT, {0: Dim("batch", min=1, max=4096)})


def export_text_encoder(
    encoder: nn.Module, context_length: int, path: Path, *, fixed_length: bool = False
) -> None:
    """int64 [batch, length] -> float32 [batch, D], dynamic batch and length (2..context);
    `fixed_length` (FixedLengthTextEncoder): the length is the context, in the graph too."""
    from torch.export import Dim

    batch = Dim("batch", min=1, max=4096)
    if fixed_length:
        example = torch.ones((2, context_length), dtype=torch.int64)
        _export(encoder, example, path, TEXT_INPUT, TEXT_OUTPUT, {0: batch})
        return
    example = torch.ones((2, 8), dtype=torch.int64)
    # The legacy exporter bakes the traced length into a Reshape; torch.export keeps it symbolic.
    dims = {0: batch, 1: Dim("length", min=2, max=context_length)}
    _export(encoder, example, path, TEXT_INPUT, TEXT_OUTPUT, dims)


def _export(
    module: nn.Module,
    example: torch.Tensor,
    path: Path,
    input_name: str,
    output_name: str,
    dims: dict[int, Any],
) -> None:
    # ONNX's protobuf caps one file at 2 GB; past that the weights go beside it.
    big = sum(p.numel() * p.element_size() for p in module.parameters()) > _TWO_GB * 0.9
    with warnings.catch_warnings():
        # torch.export warns about its own internals (pytree specs): not ours to act on.
        warnings.simplefilter("ignore", FutureWarning)
        torch.onnx.export(
            module,
            (example,),
            str(path),
            dynamo=True,
            external_data=big,
            opset_version=18,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_shapes={input_name: dims},
        )


def check_parity(
    clip: nn.Module,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    tokenizer: Any,
    image_path: Path,
    text_path: Path,
    image_size: int,
    seed: int = 0,
) -> Parity:
    """Compare both ONNX graphs with open_clip's own encode_image / encode_text (77 tokens)."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (4, image_size, image_size, 3), dtype=torch.uint8, generator=gen)
    pixels = images.permute(0, 3, 1, 2).float() / 255.0
    pixels = (pixels - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    texts = ["a photo of a cat", "a red bicycle against a brick wall", "", "x " * 100]
    tokens = tokenizer(texts)
    vocab = int(tokens.max())  # the end-of-text id; random ids stay below it
    random_rows = torch.randint(1, vocab, (2, tokens.shape[1]), generator=gen)
    random_rows[0, 20:] = 0
    random_rows[0, 19] = vocab
    random_rows[1, -1] = vocab
    tokens = torch.cat([tokens, random_rows])
    with torch.no_grad():
        ref_image = clip.encode_image(pixels).numpy()  # type: ignore[operator]
        ref_text = clip.encode_text(tokens).numpy()  # type: ignore[operator]
    image_out = _run(image_path, IMAGE_INPUT, images.numpy())
    text_out = _run(text_path, TEXT_INPUT, tokens.numpy())
    return Parity(
        image=float(row_cosines(image_out, ref_image).min()),
        text=float(row_cosines(text_out, ref_text).min()),
    )


def _run(path: Path, name: str, array: AnyArray) -> AnyArray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {name: array})[0]  # type: ignore[no-any-return]
