"""`up --precision`: which export the first start's model step asks for (without it, the
host's: int8 on a CPU, fp16 on a GPU, each encoder falling back to fp32 below the floor), and
what it never does (swap the served weights for random ones when only the precision was to
change). The export child is replaced by a recorder: these tests are about the command `up`
builds; tests/integration/test_precision.py runs the export itself."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from core.embedding.manifest import (
    EncoderFallback,
    ImagePreprocessing,
    ModelManifest,
    TokenizerSpec,
    write_manifest,
)
from photosearch.up import bootstrap
from photosearch.up.bootstrap import BootstrapError, Host, detect_host, ensure_model
from photosearch.up.processes import Child

TAG = "laion2b_s34b_b79k"


def _served(repo: Path, weights: str, precision: str = "fp32", **served: object) -> ModelManifest:
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
        **served,
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

    def variant(self) -> list[str]:
        """What follows `--precision` in the first export's command."""
        command = self.commands[0]
        return command[command.index("--precision") :]


CPU = Host(False, "onnxruntime has no CUDA provider here")
GPU = Host(True, "GPU 0: NVIDIA H100 80GB HBM3")


def _first_start(repo: Path, host: Host, **asked: object) -> tuple[Exports, list[str]]:
    said: list[str] = []
    runs = Exports()
    with pytest.raises(BootstrapError):  # the recorder's export fails: only its command matters
        ensure_model(
            repo, repo, arch="ViT-B-32", pretrained="none", say=said.append, run=runs,
            host=lambda: host, **asked,  # type: ignore[arg-type]
        )  # fmt: skip
    return runs, said


def test_a_first_start_on_a_cpu_host_exports_int8_with_the_fallback(tmp_path: Path) -> None:
    runs, said = _first_start(tmp_path, CPU)
    assert runs.variant() == ["--precision", "int8", "--fallback"]
    assert said[0] == (
        "no GPU (onnxruntime has no CUDA provider here): a first export serves int8, each "
        "encoder in fp32 instead where int8 falls below the floor; --precision chooses another"
    )


def test_a_first_start_on_a_gpu_host_exports_fp16_with_the_fallback(tmp_path: Path) -> None:
    runs, said = _first_start(tmp_path, GPU)
    assert runs.variant() == ["--precision", "fp16", "--fallback"]
    assert said[0].startswith("a GPU (GPU 0: NVIDIA H100 80GB HBM3): a first export serves fp16")


def test_an_explicit_precision_falls_back_only_when_asked_to(tmp_path: Path) -> None:
    # Asked for: a demand the export must meet or fail (docs/operating/model.md says why).
    runs, said = _first_start(tmp_path, GPU, precision="int8")
    assert runs.variant() == ["--precision", "int8"]
    assert not any("GPU" in line for line in said)  # the host decided nothing
    runs, _ = _first_start(tmp_path, CPU, precision="fp32", fallback=True)
    assert runs.variant() == ["--precision", "fp32", "--fallback"]


def test_a_later_start_keeps_the_newest_precision_and_says_so(tmp_path: Path) -> None:
    fallback = EncoderFallback(encoder="image", wanted="int8", cosine=0.98931, floor=0.99)
    served = _served(
        tmp_path, TAG, "int8", image_precision="fp32", text_precision="int8", fallbacks=[fallback]
    )
    said: list[str] = []
    runs = Exports()
    choice = ensure_model(
        tmp_path, tmp_path, arch="ViT-B-32", pretrained=None, say=said.append, run=runs,
        host=lambda: GPU,  # a GPU now changes nothing: no surprise re-export on upgrade
    )  # fmt: skip
    assert choice.manifest == served and not choice.exported and runs.commands == []
    assert said == [
        "keeping the precision of version 1 (int8 text, fp32 image (image encoder's int8 "
        "cosine 0.9893 is below the floor 0.99)); --precision changes it (a new export and a "
        "reindex)"
    ]


def test_new_weights_on_a_later_start_keep_the_newest_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _served(tmp_path, "random", "fp32")
    monkeypatch.setattr(bootstrap, "reachable", lambda *_: False)
    runs = Exports()
    with pytest.raises(BootstrapError):
        ensure_model(
            tmp_path, tmp_path, arch="ViT-B-32", pretrained=TAG, say=print, run=runs,
            host=lambda: CPU,
        )  # fmt: skip
    assert runs.variant() == ["--precision", "fp32", "--fallback"]


def test_this_machine_is_a_cpu_host() -> None:
    """The real check, on a machine without onnxruntime-gpu (the suite's lock has the CPU
    build): int8, and the reason names what is missing."""
    host = detect_host()
    assert not host.gpu and host.precision == "int8"
    assert "onnxruntime-gpu is not installed" in host.why


def test_a_gpu_host_is_onnxruntime_gpu_with_a_gpu_that_nvidia_smi_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU here: onnxruntime-gpu's presence is pretended and nvidia-smi is a script that
    answers as the driver's does."""
    real = metadata.version
    monkeypatch.setattr(
        metadata,
        "version",
        lambda name: "1.23.2" if name == "onnxruntime-gpu" else real(name),
    )
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a1e4c3b-0000)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect_host() == Host(True, "GPU 0: NVIDIA H100 80GB HBM3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_host() == Host(False, "CUDA_VISIBLE_DEVICES hides every GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    assert detect_host() == Host(False, "nvidia-smi lists no GPU")


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
