"""What the deployment files' tests share: the repository root and the settings' variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from core.settings import Settings

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
