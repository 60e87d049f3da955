"""`up --precision`: which export the first start's model step asks for, and what it never does
(swap the served weights for random ones when only the precision was to change)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.embedding.manifest import (
    ImagePreprocessing,
    ModelManifest,
    TokenizerSpec,
    write_manifest,
)
from photosearch.up import bootstrap
from photosearch.up.bootstrap import BootstrapError, ensure_model
from photosearch.up.processes import Child

TAG = "laion2b_s34b_b79k"


def _served(repo: Path, weights: str, precision: str = "fp32") -> ModelManifest:
    manifest = ModelManifest(
        version=1,
        arch="ViT-B-32",
        arch_config={"embed_dim": 512},
        weights=weights,
        embedding_dim=512,
        image=ImagePreprocessing(size=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
        tokenizer=TokenizerSpec(context_length=77, sot_id=49406, eot_id=49407),
        target="cpu",
        precision=precision,
        files={},
        exported_at="2026-11-24T00:00:00+00:00",
        exporter={},
    )
    write_manifest(repo, manifest)
    return manifest


class Exports:
    """Records each export `up` would run; each fails, writing its reason to the log."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, child: Child) -> int:
        self.commands.append(child.command)
        child.log_path.write_text("could not download the weights\n")
        return 1

    def weights(self) -> list[str]:
        return [c[c.index("--pretrained") + 1] for c in self.commands]


def test_the_newest_version_serves_when_its_precision_is_the_one_asked(tmp_path: Path) -> None:
    served = _served(tmp_path, TAG, "int8")
    runs = Exports()
    for precision in ("int8", None):
        choice = ensure_model(
            tmp_path, tmp_path, arch="ViT-B-32", pretrained=None, say=print, run=runs,
            precision=precision,
        )  # fmt: skip
        assert choice.manifest == served and not choice.exported
    assert runs.commands == []


def test_a_precision_change_exports_the_same_weights_and_never_random_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _served(tmp_path, TAG)
    monkeypatch.setattr(bootstrap, "reachable", lambda *_: False)  # offline: no download
    runs = Exports()
    with pytest.raises(BootstrapError, match="the model export failed"):
        ensure_model(
            tmp_path, tmp_path, arch="other-arch", pretrained=None, say=print, run=runs,
            precision="int8",
        )  # fmt: skip
    # The served version's architecture and weights, from the local cache only; no fallback
    # to random weights, which a first start takes but a precision change must not.
    assert runs.weights() == [TAG]
    assert runs.commands[0][runs.commands[0].index("--arch") + 1] == "ViT-B-32"
    assert runs.commands[0][-2:] == ["--precision", "int8"]


def test_new_weights_that_cannot_be_had_still_fall_back_to_random_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _served(tmp_path, "random")
    monkeypatch.setattr(bootstrap, "reachable", lambda *_: False)
    runs = Exports()
    with pytest.raises(BootstrapError):
        ensure_model(
            tmp_path, tmp_path, arch="ViT-B-32", pretrained=TAG, say=print, run=runs,
            precision="int8",
        )  # fmt: skip
    assert runs.weights() == [TAG, "none"]
