"""Export one model version: open_clip -> ONNX encoders + tokenizer + manifest + Triton configs."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from core.embedding.manifest import (
    IMAGE_MODEL,
    TEXT_MODEL,
    TOKENIZER_FILE,
    EncoderFallback,
    ImagePreprocessing,
    ModelManifest,
    Precision,
    VariantQuality,
    list_versions,
    sha256_file,
    write_manifest,
)
from model.export_errors import ExportError
from model.precision import Embedded, PrecisionOptions
from model.repository import next_version, version_dir, write_configs
from model.triton_config import BatchingOptions, Target


@dataclass
class LoadedClip:
    """An open_clip model with what the export needs to know about it."""

    model: Any
    tokenizer: Any
    arch: str
    arch_config: dict[str, Any]
    weights: str
    weights_sha256: str | None
    preprocess: ImagePreprocessing


log = logging.getLogger(__name__)


class _OpenClipDetail(logging.Filter):
    """open_clip logs a failed download at ERROR on the root logger before raising it, which
    printed the whole nested error above ours: it becomes debug detail (`photosearch --debug`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "open_clip" in record.pathname and record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return record.levelno > logging.DEBUG or logging.getLogger().isEnabledFor(logging.DEBUG)


def _why_weights_failed(exc: BaseException) -> str:
    """One clause for an operator: open_clip's errors nest hub, HTTP and cache errors."""
    text = " ".join(str(exc).split())
    if "Failed to download" in text or "offline" in text.lower():
        return "they could not be downloaded (no network, or the download was refused)"
    if "state_dict" in text or "size mismatch" in text:
        return "the checkpoint does not match this architecture"
    first = text.split(". ")[0]
    return first if len(first) <= 120 else first[:117] + "..."


def load_clip(arch: str, pretrained: str, tokenizer: Path | None = None) -> LoadedClip:
    """Build the open_clip model for `arch` (a name or a config JSON) with `pretrained` weights;
    `tokenizer`, a local Hugging Face tokenizer, replaces the config's hf_tokenizer_name."""
    from model.onnx_export import import_open_clip
    from model.tokenizer_export import load_open_clip_tokenizer

    open_clip = import_open_clip()
    name = arch
    if arch.endswith(".json"):
        path = Path(arch)
        if not path.is_file():
            raise ExportError(f"model config {arch} does not exist")
        open_clip.add_model_config(path)
        name = path.stem
    config = open_clip.get_model_config(name)
    if config is None:
        raise ExportError(
            f"unknown architecture {arch!r}; open_clip knows {open_clip.list_models()}"
        )
    # Before the weights: a tokenizer that cannot be exported is refused in a second.
    text_tokenizer = load_open_clip_tokenizer(open_clip, name, config, tokenizer)

    weights, checkpoint, digest = "random", None, None
    if pretrained.lower() not in ("none", "random", ""):
        if Path(pretrained).is_file():
            checkpoint, weights = pretrained, str(Path(pretrained).resolve())
            digest = sha256_file(Path(pretrained))
        elif pretrained in open_clip.list_pretrained_tags_by_model(name):
            checkpoint = weights = pretrained
        else:
            raise ExportError(
                f"--pretrained {pretrained!r} is neither a file nor a tag of {name} "
                f"(tags: {open_clip.list_pretrained_tags_by_model(name)})"
            )
    if checkpoint is None:
        # Random weights, but the same ones on every machine and every export: two exports
        # of one architecture embed alike, and tests see one model, not a new draw each run.
        import torch

        torch.manual_seed(0)
    detail = _OpenClipDetail()
    logging.getLogger().addFilter(detail)
    try:
        clip, _, _ = open_clip.create_model_and_transforms(name, pretrained=checkpoint)
    except (RuntimeError, OSError) as exc:
        log.debug("loading weights %r for %s failed", pretrained, name, exc_info=True)
        raise ExportError(
            f"could not load weights {pretrained!r} for {name}: {_why_weights_failed(exc)}; "
            "pass a local checkpoint (--pretrained PATH) or random weights (--pretrained none)"
        ) from None
    finally:
        logging.getLogger().removeFilter(detail)
    clip.eval()
    cfg = clip.visual.preprocess_cfg
    size = cfg["size"]
    if isinstance(size, (tuple, list)):
        if size[0] != size[1]:
            raise ExportError(f"non-square image size {size} is not supported")
        size = size[0]
    if cfg.get("resize_mode", "shortest") not in ("shortest", "squash"):
        raise ExportError(f"resize mode {cfg['resize_mode']!r} is not supported")
    preprocess = ImagePreprocessing(
        size=int(size),
        mean=tuple(cfg["mean"]),
        std=tuple(cfg["std"]),
        interpolation=cfg.get("interpolation", "bicubic"),
        resize_mode=cfg.get("resize_mode", "shortest"),
    )
    return LoadedClip(
        clip,
        text_tokenizer,
        arch,
        json.loads(json.dumps(config)),
        weights,
        digest,
        preprocess,
    )


@dataclass(frozen=True)
class Reduced:
    """What a reduced-precision export serves: each encoder's precision, and why not smaller."""

    image: Precision
    text: Precision
    quality: VariantQuality | None
    fallbacks: list[EncoderFallback]


def _reduce(
    loaded: LoadedClip,
    graphs: tuple[Path, Path],
    options: PrecisionOptions,
    photos: tuple[list[Path], str],
) -> Reduced:
    """Replace each fp32 graph by its variant where the variant embeds close enough to it;
    below the floor, keep fp32 for that encoder (options.fallback) or fail the export."""
    from model.calibration import CalibrationUnavailable, load_calibration
    from model.precision import VariantError, below_floor, compare, convert, embed

    try:
        calibration = load_calibration(loaded.preprocess, *photos)
    except CalibrationUnavailable as exc:
        if options.fallback:
            return _unmeasured(options.precision, str(exc))
        raise ExportError(str(exc)) from None
    variants = tuple(g.with_name(f"model.{options.precision}.onnx") for g in graphs)
    for graph, variant in zip(graphs, variants, strict=True):
        convert(graph, variant, options.precision)
    # open_clip's own ids at the full context: right for every text tower, causal or not.
    tokens = loaded.tokenizer(list(calibration.queries)).numpy().astype("int64")
    reference, reduced = embed(graphs, calibration, tokens), embed(variants, calibration, tokens)
    quality = compare(reference, reduced, calibration, options.floor)
    try:
        fallbacks = below_floor(options.precision, quality, fallback=options.fallback)
    except VariantError as exc:
        raise ExportError(str(exc)) from None
    low = {f.encoder for f in fallbacks}
    if low:  # the served pair's search figures, with fp32 where the variant fell short
        served = Embedded(
            reference.images if "image" in low else reduced.images,
            reference.texts if "text" in low else reduced.texts,
            reduced.provider,
        )
        quality = compare(reference, reduced, calibration, options.floor, served=served)
    for encoder, graph, variant in zip(("image", "text"), graphs, variants, strict=True):
        if encoder in low:
            for leftover in variant.parent.glob(f"{variant.name}*"):
                leftover.unlink()
        else:
            variant.replace(graph)
    precision = options.precision
    return Reduced(
        "fp32" if "image" in low else precision,
        "fp32" if "text" in low else precision,
        quality,
        fallbacks,
    )


def _unmeasured(precision: Precision, why: str) -> Reduced:
    """Both encoders in fp32: a variant that cannot be measured is not served."""
    fallbacks = [
        EncoderFallback(encoder="image", wanted=precision, detail=why),
        EncoderFallback(encoder="text", wanted=precision, detail=why),
    ]
    return Reduced("fp32", "fp32", None, fallbacks)


def onnxruntime_version() -> str:
    """The version of onnxruntime, from whichever distribution installed it: the extra `cpu`
    installs onnxruntime, the extra `gpu` onnxruntime-gpu."""
    for distribution in ("onnxruntime", "onnxruntime-gpu"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    raise metadata.PackageNotFoundError("onnxruntime")


def export_model(
    arch: str,
    pretrained: str,
    repository: Path,
    *,
    version: int | None = None,
    target: Target = "cpu",
    options: BatchingOptions | None = None,
    tokenizer: Path | None = None,
    precision: PrecisionOptions | None = None,
) -> ModelManifest:
    """Export version N (default: the next one) into `repository`, keeping every other version.
    `tokenizer`: a local Hugging Face tokenizer folder or tokenizer.json (see load_clip)."""
    from model.encoders import ImageEncoder, text_encoder_for
    from model.onnx_export import (
        PARITY_MIN_COSINE,
        check_parity,
        export_image_encoder,
        export_text_encoder,
    )
    from model.tokenizer_export import check_tokenizer, export_tokenizer

    options = options or BatchingOptions()
    precision = precision or PrecisionOptions()
    refusal = precision.refusal(target)
    if refusal:
        raise ExportError(refusal)
    photos: tuple[list[Path], str] = ([], "")
    unmeasured: Reduced | None = None
    if precision.precision != "fp32":
        from model.calibration import CalibrationUnavailable, photo_files

        try:  # before a minute of export, not after
            photos = photo_files(precision.calibration_photos)
        except CalibrationUnavailable as exc:
            if not precision.fallback:
                raise ExportError(str(exc)) from None
            unmeasured = _unmeasured(precision.precision, str(exc))
    repository.mkdir(parents=True, exist_ok=True)
    version = version if version is not None else next_version(repository)
    if version < 1:
        raise ExportError("model versions start at 1")
    if version in list_versions(repository) or any(
        version_dir(repository, n, version).exists() for n in (IMAGE_MODEL, TEXT_MODEL)
    ):
        # Overwriting a served version would change embeddings under a live collection.
        raise ExportError(f"version {version} already exists in {repository}; export a new one")

    loaded = load_clip(arch, pretrained, tokenizer)
    size = loaded.preprocess.size
    with tempfile.TemporaryDirectory(dir=repository, prefix=".export-") as tmp:
        staging = Path(tmp)
        image_path = staging / IMAGE_MODEL / "model.onnx"
        text_path = staging / TEXT_MODEL / "model.onnx"
        image_path.parent.mkdir()
        text_path.parent.mkdir()
        image_encoder = ImageEncoder(loaded.model, loaded.preprocess.mean, loaded.preprocess.std)
        export_image_encoder(image_encoder.eval(), size, image_path)
        spec = export_tokenizer(loaded.tokenizer, staging / TEXT_MODEL / TOKENIZER_FILE)
        # Dynamic length only where it embeds as open_clip does; else the whole context.
        text_encoder, padding = text_encoder_for(loaded.model, spec)
        spec = spec.model_copy(update={"padding": padding})
        check_tokenizer(loaded.tokenizer, spec, staging / TEXT_MODEL / TOKENIZER_FILE)
        export_text_encoder(
            text_encoder.eval(), spec.context_length, text_path, fixed_length=padding == "fixed"
        )
        parity = check_parity(
            loaded.model,
            loaded.preprocess.mean,
            loaded.preprocess.std,
            loaded.tokenizer,
            image_path,
            text_path,
            size,
        )
        if min(parity.image, parity.text) < PARITY_MIN_COSINE:
            raise ExportError(f"ONNX output differs from PyTorch: {parity}")
        reduced = unmeasured or Reduced("fp32", "fp32", None, [])
        if precision.precision != "fp32" and unmeasured is None:
            reduced = _reduce(loaded, (image_path, text_path), precision, photos)
        for name in (IMAGE_MODEL, TEXT_MODEL):
            final = version_dir(repository, name, version)
            final.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(staging / name, final)

    files = {
        str(p.relative_to(repository)): sha256_file(p)
        for name in (IMAGE_MODEL, TEXT_MODEL)
        for p in sorted(version_dir(repository, name, version).iterdir())
    }
    manifest = ModelManifest(
        version=version,
        arch=loaded.arch,
        arch_config=loaded.arch_config,
        weights=loaded.weights,
        weights_sha256=loaded.weights_sha256,
        embedding_dim=int(loaded.arch_config["embed_dim"]),
        image=loaded.preprocess,
        tokenizer=spec,
        target=target,
        precision=precision.precision,
        image_precision=reduced.image,
        text_precision=reduced.text,
        fallbacks=reduced.fallbacks,
        quality=reduced.quality,
        files=files,
        exported_at=datetime.now(UTC).isoformat(timespec="seconds"),
        exporter={pkg: metadata.version(pkg) for pkg in ("torch", "open_clip_torch", "onnx")}
        | {"onnxruntime": onnxruntime_version()}
        | ({"transformers": metadata.version("transformers")} if spec.kind == "huggingface" else {})
        | {"parity_image": f"{parity.image:.7f}", "parity_text": f"{parity.text:.7f}"},
    )
    # The manifest is written last: a version without one is an unfinished export.
    write_manifest(repository, manifest)
    write_configs(repository, target, options)
    return manifest
