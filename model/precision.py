"""fp16 and int8 variants of an exported fp32 graph, and how far they embed from it.

A variant keeps the fp32 graph's interface (uint8 pixels or int64 ids in, float32 L2-normalized
embeddings out), so clients, configs and the vector store never see the precision; only the
manifest records it, with the quality measured here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from core.embedding.arrays import AnyArray, row_cosines
from core.embedding.manifest import (
    IMAGE_INPUT,
    TEXT_INPUT,
    EncoderFallback,
    Precision,
    VariantQuality,
)

if TYPE_CHECKING:  # onnx and onnxruntime load only when a variant is made
    import onnx

    from model.calibration import Calibration

# The lowest mean cosine to fp32 an export accepts by default (the --min-cosine option
# overrides): fp16 only rounds, int8 quantizes every matrix product's weights.
FLOORS: dict[Precision, float] = {"fp32": 1.0, "fp16": 0.999, "int8": 0.99}
# onnxruntime 1.23's CPU provider crashes (SIGSEGV) building a session for a float16 graph
# with this graph transformer on; the python backend turns it off too.
FP16_CPU_CRASH = "FuseFp16InitializerToFp32NodeTransformer"
_TWO_GB = 2**31
_BATCH = 16


@dataclass(frozen=True)
class PrecisionOptions:
    """The precision of an export, the floor its quality must reach, what it is measured on."""

    precision: Precision = "fp32"
    min_cosine: float | None = None  # None: FLOORS[precision]
    calibration_photos: Path | None = None  # None: the demo photos
    # An encoder whose variant is below the floor (or cannot be measured) serves fp32 instead
    # of failing the export: for a precision chosen for the user, never for one asked for.
    fallback: bool = False

    @property
    def floor(self) -> float:
        return FLOORS[self.precision] if self.min_cosine is None else self.min_cosine

    def refusal(self, target: Literal["cpu", "gpu"]) -> str | None:
        """Why this precision cannot be exported for `target`, if it cannot."""
        if self.precision == "int8" and target == "gpu":
            # onnxruntime's integer kernels are the CPU's; on a GPU they fall back to it.
            return "int8 is for the CPU target; on a GPU serve fp16 (--precision fp16)"
        if self.min_cosine is not None and not 0.0 < self.min_cosine <= 1.0:
            return f"--min-cosine must be in (0, 1], got {self.min_cosine}"
        return None


class VariantError(RuntimeError):
    """A variant that cannot be made or is below its floor; the message says why."""


def convert(fp32: Path, out: Path, precision: Precision) -> None:
    """Write the `precision` variant of the graph at `fp32` to `out`."""
    if precision == "fp16":
        _to_fp16(fp32, out)
    elif precision == "int8":
        _to_int8(fp32, out)
    else:
        raise ValueError(f"no conversion to {precision}")


def _to_fp16(fp32: Path, out: Path) -> None:
    """Weights and arithmetic in half precision, float32 at both ends.

    The final L2 normalization stays float32: the sum of 512+ squared features can pass
    float16's 65504 and turn every embedding into zeros or NaNs.
    """
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(fp32))
    half = convert_float_to_float16(
        model, keep_io_types=True, node_block_list=_after_last_matmul(model)
    )
    _save(half, out)


def _after_last_matmul(model: onnx.ModelProto) -> list[str]:
    """Names of the nodes between the graph's output and the last matrix product before it."""
    producer = {output: node for node in model.graph.node for output in node.output}
    blocked: list[str] = []
    pending = [output.name for output in model.graph.output]
    seen: set[str] = set()
    while pending:
        node = producer.get(pending.pop())
        if node is None or node.name in seen or node.op_type in ("MatMul", "Gemm"):
            continue
        seen.add(node.name)
        blocked.append(node.name)
        pending.extend(node.input)
    return blocked


def _to_int8(fp32: Path, out: Path) -> None:
    """Dynamic quantization: int8 weights (per output channel), activations quantized per
    batch at run time, on the matrix products that hold nearly all of CLIP's work.

    Chosen over static quantization by measurement (the benchmark in loadtests/bench_model.py):
    dynamic needs no activation ranges that fit every photo, and onnxruntime's CPU provider has
    no integer convolution, so the patch embedding stays float32 either way. Per channel
    because trained CLIP weights have outlier channels that one scale per matrix would crush.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    # It advises its own pre-processing on the root logger: a shape inference that only helps
    # static quantization's activation ranges, none of which this uses.
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(
            fp32,
            out,
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=True,
            op_types_to_quantize=["MatMul", "Gemm"],
            use_external_data_format=fp32.stat().st_size > _TWO_GB * 0.9,
        )
    finally:
        root.setLevel(level)


def _save(model: onnx.ModelProto, out: Path) -> None:
    import onnx

    big = sum(len(t.raw_data) for t in model.graph.initializer) > _TWO_GB * 0.9
    onnx.save(model, str(out), save_as_external_data=big)


def session(path: Path, threads: int = 0) -> tuple[Any, str]:
    """An onnxruntime session on the best provider this machine has, and that provider."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    wanted = [p for p in ("CUDAExecutionProvider",) if p in ort.get_available_providers()]
    for providers in ([*wanted, "CPUExecutionProvider"], ["CPUExecutionProvider"]):
        try:
            sess = ort.InferenceSession(
                str(path), options, providers=providers, disabled_optimizers=[FP16_CPU_CRASH]
            )
        except Exception:  # a CUDA build without a usable GPU: the CPU's then
            if providers == ["CPUExecutionProvider"]:
                raise
            continue
        return sess, str(sess.get_providers()[0])
    raise AssertionError("unreachable")


def run_batches(sess: Any, name: str, array: AnyArray) -> AnyArray:
    """An onnxruntime session's output over `array`, fed to its input `name` in batches."""
    rows = [sess.run(None, {name: array[i : i + _BATCH]})[0] for i in range(0, len(array), _BATCH)]
    return np.concatenate(rows)


def _top(queries: AnyArray, gallery: AnyArray, k: int) -> list[set[int]]:
    order = np.argsort(-(queries @ gallery.T), axis=1, kind="stable")[:, :k]
    return [set(row.tolist()) for row in order]


@dataclass(frozen=True)
class Embedded:
    """The calibration sample embedded by one pair of graphs (image, text)."""

    images: AnyArray
    texts: AnyArray
    provider: str  # the onnxruntime execution provider that ran them


def embed(graphs: Sequence[Path], calibration: Calibration, tokens: AnyArray) -> Embedded:
    """The sample's photos through graphs[0], its queries through graphs[1]."""
    image, provider = session(graphs[0])
    images = run_batches(image, IMAGE_INPUT, calibration.images)
    del image
    text, _ = session(graphs[1])
    return Embedded(images, run_batches(text, TEXT_INPUT, tokens), provider)


def compare(
    reference: Embedded,
    variant: Embedded,
    calibration: Calibration,
    floor: float,
    *,
    served: Embedded | None = None,
) -> VariantQuality:
    """Each encoder's variant against fp32 (cosines), and the served pair against fp32
    (top-10 overlap, copies found first): `served` mixes fp32 for an encoder that fell back."""
    served = served or variant
    image_cos = row_cosines(reference.images, variant.images)
    text_cos = row_cosines(reference.texts, variant.texts)
    k = min(10, len(reference.images))
    overlap = [
        len(a & b) / k
        for a, b in zip(
            _top(reference.texts, reference.images, k),
            _top(served.texts, served.images, k),
            strict=True,
        )
    ]
    photos = len(calibration.photos)

    def copies_found(embeddings: AnyArray) -> float:
        nearest = np.argmax(embeddings[photos:] @ embeddings[:photos].T, axis=1)
        return round(float(np.mean(nearest == calibration.copy_of)), 4)

    return VariantQuality(
        image_cosine_mean=round(float(image_cos.mean()), 6),
        image_cosine_min=round(float(image_cos.min()), 6),
        text_cosine_mean=round(float(text_cos.mean()), 6),
        text_cosine_min=round(float(text_cos.min()), 6),
        top10_overlap=round(float(np.mean(overlap)), 4),
        copies_found_first=copies_found(served.images),
        copies_found_first_fp32=copies_found(reference.images),
        floor=floor,
        photos=photos,
        queries=len(reference.texts),
        provider=reference.provider,
    )


def below_floor(
    precision: Precision, quality: VariantQuality, *, fallback: bool
) -> list[EncoderFallback]:
    """The encoders whose mean cosine to fp32 is below the floor: each to serve fp32 with
    `fallback`, else VariantError, which says why and what to change."""
    low = [
        EncoderFallback(encoder=encoder, wanted=precision, cosine=value, floor=quality.floor)
        for encoder, value in (
            ("image", quality.image_cosine_mean),
            ("text", quality.text_cosine_mean),
        )
        if value < quality.floor
    ]
    if low and not fallback:
        figures = ", ".join(f"{f.encoder} encoder {f.cosine:.6f}" for f in low)
        raise VariantError(
            f"{precision} embeds too far from fp32 of the same weights: mean cosine {figures}, "
            f"below the floor {quality.floor} (on {quality.photos} photos with their copies "
            f"and {quality.queries} queries). Serve fp32, pass --fallback to serve fp32 for "
            "that encoder only, or lower the floor with --min-cosine if a measured search "
            "quality says this is good enough."
        )
    return low
