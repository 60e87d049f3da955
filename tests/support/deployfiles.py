"""What the deployment files' tests share: the repository root, the settings' variables and the
flags of the local Triton."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.settings import Settings
from model.triton_server import Ports, TritonInstall, TritonServer

ROOT = Path(__file__).resolve().parents[2]


def leaf_variables(model: type[BaseModel], prefix: str = "PHOTOSEARCH_") -> list[str]:
    """Every leaf field's variable, walked independently of core.settings_doc."""
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += leaf_variables(annotation, f"{prefix}{name.upper()}__")
        else:
            names.append(f"{prefix}{name.upper()}")
    return names


def setting_variables() -> frozenset[str]:
    """The PHOTOSEARCH_* variables a compose file or a manifest may set."""
    return frozenset(leaf_variables(Settings))


def python_backend_flags() -> list[str]:
    """The python backend's flags (its stubs' shared memory) that model/triton_server.py gives
    the local server: every Triton of the deployment runs that backend, so these too."""
    server = TritonServer(Path("/models"), Ports(), Path("/triton"))
    install = TritonInstall(
        binary=Path("tritonserver"), python_backend=Path("python"), stub=Path("stub"), libs=Path()
    )
    command = server.command(install, Path("backends"))
    flags = [f for f in command if f.startswith("--backend-config=python,")]
    assert flags, command
    return flags


def export_options(args: list[str]) -> dict[str, Any]:
    """`photosearch model export ARGS` as the command itself parses them: each option's value
    (an unknown option or a bad value raises click's error)."""
    import typer.main

    from model.cli import model_app

    group = typer.main.get_command(model_app)
    command = group.commands["export"]  # type: ignore[attr-defined]
    params: dict[str, Any] = command.make_context("export", list(args)).params
    return params
