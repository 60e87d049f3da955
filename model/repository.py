"""The Triton model repository on disk: version folders, config.pbtxt for every served version."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.embedding.manifest import (
    IMAGE_MODEL,
    TEXT_MODEL,
    ModelManifest,
    list_versions,
    load_manifest,
)
from model.triton_config import (
    WARMUP_TEXT_LENGTH,
    BatchingOptions,
    Shapes,
    Target,
    image_config,
    render,
    text_config,
)

PYTHON_BACKEND = Path(__file__).parent / "python_backend" / "model.py"
MODELS = (IMAGE_MODEL, TEXT_MODEL)


def version_dir(repository: Path, name: str, version: int) -> Path:
    """Triton's layout: NAME/<version>/model.onnx."""
    return repository / name / str(version)


def next_version(repository: Path) -> int:
    """One more than the newest exported version (1 for an empty repository)."""
    versions = list_versions(repository)
    return versions[-1] + 1 if versions else 1


def common_shapes(manifests: list[ModelManifest]) -> Shapes:
    """Shapes shared by every served version; -1 where versions differ (e.g. a new architecture)."""

    def agreed(values: set[int]) -> int:
        return values.pop() if len(values) == 1 else -1

    specs = [m.tokenizer for m in manifests]
    fixed = {s.context_length for s in specs if s.padding == "fixed"}
    dynamic = [s.context_length for s in specs if s.padding == "dynamic"]
    # Versions that disagree (a SigLIP beside a CLIP while a reindex runs) serve under one
    # config with any length; each fixed-length version takes only its own (python backend).
    # The warmup runs on every version: a length they all take, or none.
    warmup = WARMUP_TEXT_LENGTH if not fixed else fixed.copy().pop()
    if len(fixed) > 1 or any(warmup > ctx for ctx in dynamic):
        warmup = -1
    return Shapes(
        image_size=agreed({m.image.size for m in manifests}),
        embedding_dim=agreed({m.embedding_dim for m in manifests}),
        context_length=agreed({s.context_length for s in specs}),
        text_length=agreed({s.context_length if s.padding == "fixed" else 0 for s in specs}),
        text_warmup_length=warmup,
    )


def write_configs(repository: Path, target: Target, opts: BatchingOptions) -> None:
    """(Re)write both config.pbtxt files for all exported versions; install the runner."""
    manifests = [load_manifest(repository, v) for v in list_versions(repository)]
    if not manifests:
        raise FileNotFoundError(f"no exported model version in {repository}")
    shapes = common_shapes(manifests)
    for name, config in (
        (IMAGE_MODEL, image_config(target, shapes, opts)),
        (TEXT_MODEL, text_config(target, shapes, opts)),
    ):
        # Both targets run the python backend (triton_config._base says why).
        for manifest in manifests:
            shutil.copyfile(
                PYTHON_BACKEND, version_dir(repository, name, manifest.version) / "model.py"
            )
        path = repository / name / "config.pbtxt"
        tmp = path.with_suffix(".pbtxt.tmp")
        tmp.write_text(render(config))
        tmp.replace(path)
