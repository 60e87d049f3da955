"""What `photosearch up` prepares: a model version to serve, and the photos to index.

The export imports torch, so it runs as a child process (`photosearch model export`); this
module only decides what to export and reads the manifests it leaves.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from core.embedding.manifest import ModelManifest, list_versions, load_manifest
from core.originals import SourceRefused, parse_source
from photosearch.up.processes import Child, log_tail

DEFAULT_ARCH = "ViT-B-32"
DEFAULT_PRETRAINED = "laion2b_s34b_b79k"
# Where open_clip fetches laion weights from.
WEIGHTS_HOST = ("huggingface.co", 443)
RANDOM_WEIGHTS_WARNING = (
    "the model has RANDOM weights: text search returns meaningless results; searching by an "
    "image and 'more like this' still work (they compare photos with the same encoder). "
    "Give real weights with --pretrained PATH (an open_clip checkpoint of ViT-B-32)."
)

Say = Callable[[str], None]


class BootstrapError(RuntimeError):
    """`up` cannot go on; the message says what to do."""


@dataclass(frozen=True)
class ModelChoice:
    manifest: ModelManifest
    exported: bool  # a new version was exported by this start
    previous: int | None  # the newest version before it, if any


@dataclass(frozen=True)
class Host:
    """Where `up` serves the model: the precision a first export takes follows from it."""

    gpu: bool
    why: str  # one clause, printed with the choice

    @property
    def precision(self) -> str:
        # int8's integer kernels are the CPU's; a GPU's are fp16 (docs/operating/model.md).
        return "fp16" if self.gpu else "int8"


def detect_host() -> Host:
    """A GPU host is one where Triton's onnxruntime can run on a visible NVIDIA GPU: the
    onnxruntime-gpu build is installed (the only one with the CUDA provider; checked by its
    distribution, so this process never imports onnxruntime) and nvidia-smi lists a GPU."""
    try:
        metadata.version("onnxruntime-gpu")
    except metadata.PackageNotFoundError:
        return Host(
            False, "onnxruntime has no CUDA provider here: onnxruntime-gpu is not installed"
        )
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return Host(False, "CUDA_VISIBLE_DEVICES hides every GPU")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Host(False, "no NVIDIA driver here (no nvidia-smi)")
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Host(False, f"nvidia-smi failed: {exc}")
    gpus = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
    if listed.returncode != 0 or not gpus:
        return Host(False, "nvidia-smi lists no GPU")
    return Host(True, gpus[0].split(" (UUID")[0])


def reachable(host: tuple[str, int], timeout_s: float = 3.0) -> bool:
    """A quick look for a network before open_clip spends a minute retrying downloads."""
    try:
        socket.create_connection(host, timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _same_weights(manifest: ModelManifest, arch: str, pretrained: str) -> bool:
    if manifest.arch != arch:
        return False
    if Path(pretrained).is_file():
        return manifest.weights == str(Path(pretrained).resolve())
    return manifest.weights == pretrained


def ensure_model(
    repository: Path,
    logs: Path,
    *,
    arch: str,
    pretrained: str | None,
    say: Say,
    run: Callable[[Child], int],
    precision: str | None = None,
    fallback: bool = False,
    host: Callable[[], Host] = detect_host,
) -> ModelChoice:
    """The newest exported version, exporting one first when there is none.

    An explicit `--pretrained` or `--precision` different from what the newest version was
    exported with makes a new version; the caller then reindexes into it beside the live
    collection (a version is one precision per encoder: queries and vectors stay on one).
    Without `--precision`, a first export takes the host's precision (int8 on a CPU, fp16 on
    a GPU), each encoder falling back to fp32 below the floor; later ones keep the newest's.
    """
    versions = list_versions(repository)
    newest = load_manifest(repository, max(versions)) if versions else None
    if precision is None:
        fallback = True  # chosen for the user: never worse than fp32, never a failed start
        if newest is None:
            found = host()
            precision = found.precision
            say(
                f"{'a GPU' if found.gpu else 'no GPU'} ({found.why}): a first export serves "
                f"{precision}, each encoder in fp32 instead where {precision} falls below the "
                "floor; --precision chooses another"
            )
        else:
            precision = newest.precision
            say(
                f"keeping the precision of version {newest.version} "
                f"({newest.served_precision}); --precision changes it (a new export and a "
                "reindex)"
            )
    if (
        newest is not None
        and (pretrained is None or _same_weights(newest, arch, pretrained))
        and newest.precision == precision
    ):
        return ModelChoice(newest, exported=False, previous=None)
    same_weights = newest is not None and pretrained is None
    if newest is not None and same_weights:
        # Only the precision changes: the same weights again, never random ones instead.
        arch, pretrained = newest.arch, newest.weights

    wanted = pretrained or DEFAULT_PRETRAINED
    is_file = Path(wanted).is_file()
    if pretrained is not None and not is_file and "/" in pretrained:
        raise BootstrapError(f"--pretrained {pretrained}: no such file")
    attempts: list[tuple[str, dict[str, str]]] = []
    if is_file or wanted.lower() in ("none", "random"):
        attempts.append((wanted, {}))
    elif reachable(WEIGHTS_HOST):
        attempts += [(wanted, {}), ("none", {})]
    else:
        say(
            f"no network to {WEIGHTS_HOST[0]}: the pretrained weights {wanted!r} cannot be "
            "downloaded; trying the local Hugging Face cache, then random weights"
        )
        attempts += [(wanted, {"HF_HUB_OFFLINE": "1"}), ("none", {})]
    if same_weights:
        attempts = [a for a in attempts if a[0] != "none" or wanted == "none"]

    variant = ("--precision", precision, *(("--fallback",) if fallback else ()))
    for weights, extra_env in attempts:
        say(
            f"exporting {arch} (weights: {weights}, {precision}) to {repository}; "
            "about a minute on a CPU"
        )
        log = logs / "export.log"
        child = Child(
            "model export",
            [
                *(sys.executable, "-m", "photosearch", "model", "export"),
                *("--arch", arch, "--pretrained", weights, "--repository", str(repository)),
                *variant,
            ],
            log,
            env=dict(extra_env),  # on top of the environment `up` gives its children
        )
        if run(child) == 0:
            break
        reason = log_tail(log, 1)
        if weights == "none" or is_file or (weights, extra_env) == attempts[-1]:
            raise BootstrapError(f"the model export failed; {log}:\n{log_tail(log)}")
        say(f"the pretrained weights could not be loaded ({reason})")
    else:  # pragma: no cover - the last attempt either breaks or raises
        raise BootstrapError("no export attempt was made")

    manifest = load_manifest(repository, max(list_versions(repository)))
    return ModelChoice(manifest, exported=True, previous=newest.version if newest else None)


def is_folder(source: str, folder: Path) -> bool:
    """Whether a source (a folder, or its file URI as a sync remembers it) is that folder."""
    try:
        root = parse_source(source)
    except SourceRefused:
        return False
    return root.scheme == "file" and Path(root.path).resolve() == folder.resolve()


def photos_source(
    photos: Path | None, remembered: str | None, configured: str | None, demo_dir: Path, say: Say
) -> str:
    """What to sync: --photos, else what was synced before, else the demo photos."""
    if photos is not None:
        if not photos.is_dir():
            raise BootstrapError(f"--photos {photos}: not a folder")
        return str(photos.resolve())
    source = remembered or configured
    if source is not None and not is_folder(source, demo_dir):
        return source
    from core.demo import DemoPhotosUnavailable, write_demo_photos

    try:
        result = write_demo_photos(demo_dir)
    except DemoPhotosUnavailable as exc:
        raise BootstrapError(str(exc)) from None
    say(
        f"demo photos in {demo_dir}: {len(result.written)} written, {len(result.kept)} "
        f"unchanged, {len(result.unavailable)} unavailable"
    )
    for photo_id, why in result.unavailable.items():
        say(f"  {photo_id}: {why}")
    return str(demo_dir.resolve())
