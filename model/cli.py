"""`photosearch model ...` and `photosearch triton ...`: export versions, serve them locally."""

from __future__ import annotations

import json
import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import typer

from core.embedding.manifest import (
    IMAGE_MODEL,
    PRECISIONS,
    TEXT_MODEL,
    Precision,
    list_versions,
    load_manifest,
)
from core.settings import MAX_TEXT_QUEUE_DELAY_US, get_settings
from model.cli_train import synthetic_command, train_tiny_command

CUDA = "CUDAExecutionProvider"

model_app = typer.Typer(help="Export CLIP models into the versioned Triton model repository.")
triton_app = typer.Typer(help="Run Triton on this machine and manage its loaded models.")
model_app.command("synthetic")(synthetic_command)
model_app.command("train-tiny")(train_tiny_command)


class PrecisionChoice(StrEnum):
    """The precision of an export's weights and arithmetic."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"


class Target(StrEnum):
    """Where the exported model runs."""

    CPU = "cpu"
    GPU = "gpu"


RepositoryOption = Annotated[
    Path | None,
    typer.Option("--repository", help="Triton model repository.", show_default="DATA_DIR/models"),
]


@model_app.command("export")
def export_command(
    arch: Annotated[
        str, typer.Option(help="open_clip architecture name, or a path to a model-config JSON.")
    ] = "ViT-B-32",
    pretrained: Annotated[
        str, typer.Option(help="open_clip tag (needs a network), a checkpoint file, or 'none'.")
    ] = "laion2b_s34b_b79k",
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            help="A local Hugging Face tokenizer (a folder with tokenizer.json and "
            "tokenizer_config.json, or a tokenizer.json) for models whose config names one "
            "(SigLIP, XLM-R, NLLB): replaces text_cfg.hf_tokenizer_name; nothing is downloaded.",
            show_default="the config's",
        ),
    ] = None,
    repository: RepositoryOption = None,
    version: Annotated[
        int | None, typer.Option(min=1, help="The version to write.", show_default="newest + 1")
    ] = None,
    target: Annotated[
        Target,
        typer.Option(help="cpu: python backend + onnxruntime; gpu: onnxruntime backend."),
    ] = Target.CPU,
    text_queue_delay_us: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=MAX_TEXT_QUEUE_DELAY_US,
            help="Text batching delay.",
            show_default="PHOTOSEARCH_MODEL__TEXT_QUEUE_DELAY_US",
        ),
    ] = None,
    image_queue_delay_us: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Image batching delay.",
            show_default="PHOTOSEARCH_MODEL__IMAGE_QUEUE_DELAY_US",
        ),
    ] = None,
    ort_threads: Annotated[
        int | None,
        typer.Option(
            min=0, help="CPU target: 0 = all cores.", show_default="PHOTOSEARCH_MODEL__ORT_THREADS"
        ),
    ] = None,
    text_ort_threads: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Threads of each text instance.",
            show_default="PHOTOSEARCH_MODEL__TEXT_ORT_THREADS",
        ),
    ] = None,
    precision: Annotated[
        PrecisionChoice,
        typer.Option(help="fp32; fp16 for GPUs; int8 (dynamic quantization) for CPUs."),
    ] = PrecisionChoice.FP32,
    min_cosine: Annotated[
        float | None,
        typer.Option(
            help="fp16/int8: the lowest mean cosine to fp32 accepted.",
            show_default="0.999 fp16, 0.99 int8",
        ),
    ] = None,
    calibration_photos: Annotated[
        Path | None,
        typer.Option(
            help="fp16/int8: photos to measure the variant on (up to 64).",
            show_default="the demo photos",
        ),
    ] = None,
    fallback: Annotated[
        bool,
        typer.Option(
            help="fp16/int8: an encoder below the floor (or not measurable) serves fp32, with "
            "the reason printed and in the manifest, instead of failing the export.",
        ),
    ] = False,
    instances: Annotated[int, typer.Option(min=1, help="Image model instances per Triton.")] = 1,
    text_instances: Annotated[
        int, typer.Option(min=1, help="Text model instances per Triton (2: see triton_config).")
    ] = 2,
    tensorrt: Annotated[bool, typer.Option(help="GPU target: TensorRT FP16 accelerator.")] = True,
    trt_cache_dir: Annotated[str, typer.Option(help="GPU target: TensorRT engine cache.")] = (
        "/tmp/triton-trt-cache"
    ),
) -> None:
    """Export both encoders of one model version; earlier versions stay and keep serving."""
    from model.export import export_model
    from model.export_errors import ExportError
    from model.precision import PrecisionOptions
    from model.triton_config import BatchingOptions

    settings = get_settings()
    options = BatchingOptions(
        text_queue_delay_us=_or(text_queue_delay_us, settings.model.text_queue_delay_us),
        image_queue_delay_us=_or(image_queue_delay_us, settings.model.image_queue_delay_us),
        ort_threads=_or(ort_threads, settings.model.ort_threads),
        text_ort_threads=_or(text_ort_threads, settings.model.text_ort_threads),
        instances=instances,
        text_instances=text_instances,
        tensorrt=tensorrt,
        trt_cache_dir=trt_cache_dir,
    )
    repo = repository or settings.repository
    try:
        manifest = export_model(
            arch,
            pretrained,
            repo,
            version=version,
            target=_target(target),
            options=options,
            tokenizer=tokenizer,
            precision=PrecisionOptions(
                _precision(precision), min_cosine, calibration_photos, fallback
            ),
        )
    except ExportError as exc:
        typer.secho(f"export failed: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"exported version {manifest.version} ({manifest.arch}, {manifest.served_precision}, "
        f"weights: {manifest.weights}, "
        f"{manifest.embedding_dim}-d, image {manifest.image.size}px, text "
        f"{manifest.tokenizer.context_length} tokens {manifest.tokenizer.padding}) to {repo}"
    )
    if manifest.quality is not None:
        q = manifest.quality
        typer.echo(
            f"{manifest.precision} against fp32 (on {q.photos} photos with copies, {q.queries} "
            f"queries): mean cosine image {q.image_cosine_mean:.6f}, text "
            f"{q.text_cosine_mean:.6f}; top-10 overlap {q.top10_overlap:.3f}; copies found "
            f"first {q.copies_found_first:.3f} (fp32 {q.copies_found_first_fp32:.3f})"
        )
    measured_on_cpu = manifest.quality is None or manifest.quality.provider != CUDA
    served = (manifest.image_precision, manifest.text_precision)
    if "fp16" in served and manifest.target == "cpu" and measured_on_cpu:
        typer.secho(
            "fp16 is for GPUs: on a CPU onnxruntime casts most of it back to float32, slower "
            "than fp32; int8 is the CPU's smaller variant",
            fg="yellow",
        )
    if manifest.random_weights:
        typer.secho(
            "random weights: text search is meaningless; image similarity still works",
            fg="yellow",
        )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _precision(value: PrecisionChoice) -> Precision:
    # The choices are the manifest's precisions, spelled alike (mypy sees only a str).
    return next(p for p in PRECISIONS if p == value.value)


def _target(value: Target) -> Literal["cpu", "gpu"]:
    return "gpu" if value is Target.GPU else "cpu"


@model_app.command("list")
def list_command(
    repository: RepositoryOption = None, as_json: bool = typer.Option(False, "--json")
) -> None:
    """The exported model versions and where their weights came from."""
    repo = repository or get_settings().repository
    if not repo.is_dir():  # a mistyped path listed nothing and exited 0
        typer.echo(f"no model repository at {repo}: no such folder", err=True)
        raise typer.Exit(2)
    manifests = [load_manifest(repo, v) for v in list_versions(repo)]
    if not manifests and not as_json:  # (JSON: the empty list says it)
        typer.echo(
            f"no model version in {repo}: export one (`photosearch model export`) or start "
            "`photosearch up`",
            err=True,
        )
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps([m.model_dump(mode="json") for m in manifests], indent=2))
        return
    for m in manifests:
        # The variant's worse encoder: what the export's floor was checked on.
        cosine = (
            f"cos {min(m.quality.image_cosine_mean, m.quality.text_cosine_mean):.4f}"
            if m.quality
            else "-"
        )
        typer.echo(
            f"{m.version}\t{m.arch}\t{m.weights}\t{m.embedding_dim}-d\t{m.target}\t"
            f"{m.served_precision}\t{cosine}\t{m.exported_at}"
        )


@triton_app.command("serve")
def serve_command(
    repository: RepositoryOption = None,
    http_port: Annotated[
        int | None, typer.Option(show_default="PHOTOSEARCH_TRITON__HTTP_PORT")
    ] = None,
    grpc_port: Annotated[
        int | None, typer.Option(show_default="PHOTOSEARCH_TRITON__GRPC_PORT")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(show_default="PHOTOSEARCH_TRITON__METRICS_PORT")
    ] = None,
    work_dir: Annotated[
        Path | None, typer.Option(help="Logs and backends.", show_default="DATA_DIR/triton")
    ] = None,
) -> None:
    """Start tritonserver (explicit model control), wait until ready, stop on Ctrl-C / SIGTERM."""
    from model.triton_server import (
        Ports,
        TritonServer,
        TritonStartError,
        new_control_key,
        write_control_key,
    )

    settings = get_settings()
    ports = Ports(
        http=http_port or settings.triton.http_port,
        grpc=grpc_port or settings.triton.grpc_port,
        metrics=metrics_port or settings.triton.metrics_port,
    )
    work = work_dir or settings.data_dir / "triton"
    # Unset: a key of this start's own, in a file only this user reads, so that no other
    # local process can unload a model; `triton load` finds it there.
    key, key_file = settings.triton.control_key, None
    if key is None:
        key = new_control_key()
        key_file = write_control_key(work, key)
    try:
        server = TritonServer(
            repository or settings.repository,
            ports,
            work,
            startup_timeout_s=settings.triton.startup_timeout_s,
            control_key=key,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="PHOTOSEARCH_TRITON__CONTROL_KEY") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        try:
            server.start()
        except TritonStartError as exc:
            typer.secho(str(exc), fg="red", err=True)
            raise typer.Exit(1) from None
        typer.echo(
            f"Triton ready: grpc 127.0.0.1:{ports.grpc}, http :{ports.http}, "
            f"metrics :{ports.metrics}; log {server.log_path}"
        )
        where = key_file or "PHOTOSEARCH_TRITON__CONTROL_KEY"
        typer.echo(f"Loading and unloading models needs the control key: {where}")
        assert server.process is not None
        while not stop.wait(0.5):
            if server.process.poll() is not None:
                typer.secho(f"tritonserver exited:\n{server.log_tail()}", fg="red", err=True)
                raise typer.Exit(1)
        server.stop()
        typer.echo("Triton stopped")
    finally:
        # The key of one start is worthless after it: leave no stale secret behind.
        if key_file is not None:
            key_file.unlink(missing_ok=True)


@triton_app.command("load")
def load_command(
    url: Annotated[
        str | None,
        typer.Option(help="Triton gRPC host:port.", show_default="PHOTOSEARCH_TRITON__URL"),
    ] = None,
) -> None:
    """(Re)load clip_image and clip_text: new versions start serving, old ones keep serving."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from model.triton_server import grpc_control_headers, read_control_key

    settings = get_settings()
    # The setting, else the key a local `triton serve` wrote under the data directory.
    key = settings.triton.control_key or read_control_key(settings.data_dir / "triton")
    headers = grpc_control_headers(key) if key else None
    client = grpcclient.InferenceServerClient(url or settings.triton.url)
    try:
        for name in (IMAGE_MODEL, TEXT_MODEL):
            client.load_model(name, headers=headers)
            typer.echo(f"{name}: loaded")
    except InferenceServerException as exc:
        typer.secho(f"load failed: {exc.message()}", fg="red", err=True)
        if "restricted" in (exc.message() or ""):
            typer.secho(
                "set PHOTOSEARCH_TRITON__CONTROL_KEY to the key Triton was started with",
                fg="red",
                err=True,
            )
        raise typer.Exit(1) from None
    finally:
        client.close()
