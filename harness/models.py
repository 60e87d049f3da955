"""A model repository ready to serve: the tests' tiny CLIP, or ViT-B-32 exported once and kept."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from core.embedding.manifest import list_versions, load_manifest
from harness.machine import ROOT

TINY_CONFIG = ROOT / "tests" / "data" / "tiny-clip.json"  # the tests' tiny CLIP: a data file
WORK = ROOT / "var" / "benchmarks"  # what the benchmarks keep between runs


def default_repository() -> Path:
    return WORK / "models"


def ensure_model(repo: Path, arch: str) -> int:
    """The newest version in `repo`, exported (random weights) when there is none yet."""
    if repo.is_dir() and list_versions(repo):
        version = list_versions(repo)[-1]
        print(f"model: {repo} version {version} ({load_manifest(repo, version).arch})", flush=True)
        return version
    from model.export import export_model

    if repo.is_dir() and any(repo.iterdir()):
        if repo != default_repository():
            raise SystemExit(f"{repo} holds files but no exported version: give an empty folder")
        shutil.rmtree(repo)  # an export of ours that was interrupted
    print(f"exporting {arch} (random weights) into {repo}, about a minute ...", flush=True)
    started = time.perf_counter()
    manifest = export_model(arch, "none", repo)
    print(f"  exported version {manifest.version} in {time.perf_counter() - started:.0f} s")
    return manifest.version
