"""The locks (requirements/, `make lock`) against pyproject.toml and the deployment: each client
library at the minor version of the server the deployment runs, so that an image bump cannot
drift from the client silently, and every lock still what pyproject.toml asks for."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support.deployfiles import ROOT

REQUIREMENTS = ROOT / "requirements"
# What `make setup` installs, what the images install.
DEV, DEV_GPU = REQUIREMENTS / "dev.txt", REQUIREMENTS / "dev-gpu.txt"
APP, EXPORT = REQUIREMENTS / "app.txt", REQUIREMENTS / "export.txt"
# What the Triton images install for the python backend (infra/docker/triton-*.Dockerfile).
TRITON_CPU, TRITON_GPU = REQUIREMENTS / "triton-cpu.txt", REQUIREMENTS / "triton-gpu.txt"
SETUP_EXTRAS = ("embedded", "export", "dev", "demo", "loadtest")

QDRANT_IMAGE = re.compile(r"\bqdrant/qdrant:v?(\d+\.\d+\.\d+)\b")
TRITON_IMAGE = re.compile(r"\bnvcr\.io/nvidia/tritonserver:(\d\d\.\d\d)-py3\b")
# NGC's tritonserver YY.MM container holds Triton 2.N (NVIDIA's release notes of each
# container, "Contents of the Triton Inference Server container"). A tag missing here fails
# the test below: add its line from those notes.
TRITON_OF_NGC = {
    "24.01": "2.42",
    "24.02": "2.43",
    "24.03": "2.44",
    "24.04": "2.45",
    "24.05": "2.46",
    "24.06": "2.47",
    "24.07": "2.48",
    "24.08": "2.49",
    "24.09": "2.50",
    "24.10": "2.51",
    "24.11": "2.52",
    "24.12": "2.53",
    "25.01": "2.54",
    "25.02": "2.55",
}


def deployment_files() -> list[Path]:
    files = [ROOT / "docker-compose.yml", *sorted((ROOT / "infra").rglob("*.yaml"))]
    return files + sorted((ROOT / "infra" / "docker").glob("*.Dockerfile"))


@cache
def locked(lock: Path) -> dict[str, Version]:
    """A lock's packages: canonical name -> exact version."""
    found: dict[str, Version] = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            found[canonicalize_name(match[1])] = Version(match[2])
    assert found, f"{lock} pins nothing"
    return found


def minor(version: Version | str) -> tuple[int, int]:
    v = Version(str(version))
    return v.major, v.minor


def project() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return data


def requirements(*extras: str) -> list[Requirement]:
    found = [Requirement(r) for r in project()["dependencies"]]
    for extra in extras:
        found += [Requirement(r) for r in project()["optional-dependencies"][extra]]
    return found


def qdrant_servers() -> dict[str, str]:
    """Every Qdrant the deployment runs: file -> image version."""
    found = {}
    for path in deployment_files():
        for match in QDRANT_IMAGE.finditer(path.read_text()):
            found[f"{path.relative_to(ROOT)}: {match[0]}"] = match[1]
    # The Helm release (infra/qdrant/values.yaml) names its tag apart from the repository.
    values = yaml.safe_load((ROOT / "infra" / "qdrant" / "values.yaml").read_text())
    tag = str((values.get("image") or {}).get("tag") or "")
    assert tag, "infra/qdrant/values.yaml: set image.tag; the chart's default moves with it"
    found["infra/qdrant/values.yaml: image.tag"] = tag.removeprefix("v")
    return found


def triton_servers() -> dict[str, str]:
    """Every Triton the deployment runs: file -> NGC container tag (YY.MM)."""
    found = {}
    for path in deployment_files():
        text = path.read_text()
        for match in TRITON_IMAGE.finditer(text):
            found[f"{path.relative_to(ROOT)}: {match[0]}"] = match[1]
        # Kustomize's images: a newTag for the name, written apart.
        if path.name == "kustomization.yaml":
            for image in yaml.safe_load(text).get("images", []):
                if image["name"] == "nvcr.io/nvidia/tritonserver" and "newTag" in image:
                    tag = str(image["newTag"])
                    assert tag.endswith("-py3"), f"{path}: {tag}"
                    found[f"{path.relative_to(ROOT)}: newTag {tag}"] = tag.removesuffix("-py3")
    return found


def test_the_deployment_runs_one_qdrant_minor_and_the_client_is_at_it() -> None:
    servers = qdrant_servers()
    assert any(name.startswith("docker-compose.yml") for name in servers), servers
    minors = {minor(v) for v in servers.values()}
    assert len(minors) == 1, f"Qdrant servers of different minors: {servers}"
    [server] = minors
    for lock in (DEV, DEV_GPU, APP, EXPORT):
        client = locked(lock)["qdrant-client"]
        assert minor(client) == server, (
            f"{lock.name} locks qdrant-client {client}, the deployment runs Qdrant "
            f"{'.'.join(map(str, server))} ({servers}): Qdrant wants the client at the "
            "server's minor; move both together, one minor at a time"
        )


def test_the_deployment_runs_one_triton_and_the_client_is_its_release() -> None:
    servers = triton_servers()
    # Compose and Kubernetes run the images built on NGC's: their FROM names the release.
    for image in ("triton-cpu", "triton-gpu"):
        assert any(name.startswith(f"infra/docker/{image}.") for name in servers), servers
    unknown = {name: tag for name, tag in servers.items() if tag not in TRITON_OF_NGC}
    assert not unknown, f"add these NGC tags' Triton versions to TRITON_OF_NGC: {unknown}"
    releases = {minor(TRITON_OF_NGC[tag]) for tag in servers.values()}
    assert len(releases) == 1, f"Triton servers of different releases: {servers}"
    [server] = releases
    for lock in (DEV, DEV_GPU, APP, EXPORT):
        client = locked(lock)["tritonclient"]
        assert minor(client) == server, (
            f"{lock.name} locks tritonclient {client}, the deployment runs Triton "
            f"{'.'.join(map(str, server))} ({servers})"
        )


@pytest.mark.parametrize("package", ["qdrant-client", "tritonclient"])
def test_pyproject_admits_only_the_locked_minor_of_a_client(package: str) -> None:
    [requirement] = [r for r in requirements() if canonicalize_name(r.name) == package]
    version = locked(DEV)[package]
    major, minor_ = minor(version)
    assert version in requirement.specifier, requirement
    for other in (f"{major}.{minor_ + 1}.0", f"{major}.{minor_ - 1}.999"):
        assert Version(other) not in requirement.specifier, f"{requirement} admits {other}"


@pytest.mark.parametrize(
    ("lock", "extras"),
    [
        (DEV, ("cpu", *SETUP_EXTRAS)),
        (DEV_GPU, ("gpu", *SETUP_EXTRAS)),
        (APP, ()),
        (EXPORT, ("export", "cpu")),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else ",".join(v) or "core",
)
def test_each_lock_holds_what_pyproject_asks_for(lock: Path, extras: tuple[str, ...]) -> None:
    """A pyproject.toml changed without `make lock` fails here, not in someone's set-up."""
    pins = locked(lock)
    for requirement in requirements(*extras):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock.name} lacks {requirement}: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock.name} pins {name}=={pins[name]}, pyproject.toml asks for {requirement}: "
            "run `make lock`"
        )


def test_one_onnxruntime_per_lock_and_the_triton_image_runs_the_tested_one() -> None:
    # onnxruntime and onnxruntime-gpu install one module: never both.
    assert "onnxruntime" in locked(DEV) and "onnxruntime-gpu" not in locked(DEV)
    assert "onnxruntime-gpu" in locked(DEV_GPU) and "onnxruntime" not in locked(DEV_GPU)
    assert "onnxruntime" not in locked(APP)
    assert "onnxruntime-gpu" not in locked(TRITON_CPU) and "onnxruntime" not in locked(TRITON_GPU)
    tested = locked(DEV)["onnxruntime"]
    assert locked(TRITON_CPU)["onnxruntime"] == tested
    assert locked(EXPORT)["onnxruntime"] == tested
    assert locked(DEV_GPU)["onnxruntime-gpu"] == tested
    assert locked(TRITON_GPU)["onnxruntime-gpu"] == tested


# The distributions that give each module the python backend imports, Triton's own aside.
BACKEND_MODULES = {"numpy": {"numpy"}, "onnxruntime": {"onnxruntime", "onnxruntime-gpu"}}


def test_the_triton_images_lock_what_the_python_backend_imports() -> None:
    tree = ast.parse((ROOT / "model" / "python_backend" / "model.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    tops = {name.split(".")[0] for name in imported}
    outside = tops - set(sys.stdlib_module_names) - {"__future__", "triton_python_backend_utils"}
    assert outside == set(BACKEND_MODULES), f"model.py imports {outside}: lock them for Triton"
    for lock in (TRITON_CPU, TRITON_GPU):
        for module, distributions in BACKEND_MODULES.items():
            assert distributions & set(locked(lock)), f"{lock.name} lacks {module}"


def test_the_locks_take_torch_cpu_build_and_the_app_no_torch() -> None:
    for lock in (DEV, DEV_GPU, EXPORT):
        torch = locked(lock)["torch"]
        assert torch.local == "cpu", f"{lock.name}: torch {torch}"
        assert not any(name.startswith("nvidia-cu") for name in locked(lock)), lock.name
    assert "torch" not in locked(APP)


def test_shared_packages_are_locked_at_one_version() -> None:
    dev = locked(DEV)
    for lock in (DEV_GPU, APP, EXPORT, TRITON_CPU, TRITON_GPU):
        for name, version in locked(lock).items():
            if name in dev:
                assert version == dev[name], f"{lock.name}: {name} {version}, dev.txt {dev[name]}"
    gpu = locked(DEV_GPU)
    for name, version in locked(TRITON_GPU).items():
        assert name in gpu and version == gpu[name], f"triton-gpu.txt: {name} {version}"


def test_every_pin_carries_its_hashes() -> None:
    for lock in sorted(REQUIREMENTS.glob("*.txt")):
        text = lock.read_text()
        pins = re.findall(r"^\S+==\S+((?: \\\n\s+--hash=sha256:[0-9a-f]{64})*)", text, re.M)
        assert pins and all(pins), f"{lock.name}: a pin without --hash"


@pytest.mark.parametrize(
    ("dockerfile", "lock"),
    [("app", APP), ("export", EXPORT), ("triton-cpu", TRITON_CPU), ("triton-gpu", TRITON_GPU)],
)
def test_the_images_install_their_lock_hash_checked(dockerfile: str, lock: Path) -> None:
    text = (ROOT / "infra" / "docker" / f"{dockerfile}.Dockerfile").read_text()
    assert f"COPY {lock.relative_to(ROOT)} " in text
    commands = re.split(r"\n|&&", text.replace("\\\n", " "))
    installs = [command for command in commands if re.search(r"\bpip install\b", command)]
    assert installs
    for install in installs:
        # The lock hash-checked; anything else (the project's own wheel) adds no dependency.
        assert "--no-deps" in install, install
        if " -r " in install:
            assert "--require-hashes" in install, install
    assert any(" -r " in install for install in installs), dockerfile


def test_make_setup_installs_the_lock_hash_checked() -> None:
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    assert "LOCK ?= requirements/dev.txt" in makefile
    [sync] = re.findall(r"\$\(UV\) pip sync .*", makefile)
    assert "--require-hashes" in sync and "$(LOCK)" in sync
    assert "--no-deps" in makefile and "-r requirements/uv.txt" in makefile
