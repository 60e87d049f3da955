"""The CPU target's python backend picks onnxruntime's best provider: TensorRT, CUDA, the CPU.

Triton's python backend imports model/python_backend/model.py with its own
triton_python_backend_utils beside it; here a stand-in module takes that name, so the file is
loaded as Triton loads it, with nothing of it changed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from model.repository import PYTHON_BACKEND

TRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


class Logger:
    """triton_python_backend_utils.Logger's static methods, recorded."""

    lines: ClassVar[list[str]] = []

    @staticmethod
    def log_info(message: str) -> None:
        Logger.lines.append(f"info: {message}")

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.lines.append(f"warn: {message}")


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    utils = types.ModuleType("triton_python_backend_utils")
    utils.Logger = Logger  # type: ignore[attr-defined]
    Logger.lines = []
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    spec = importlib.util.spec_from_file_location("python_backend_model", PYTHON_BACKEND)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("available", "chosen"),
    [
        ([CPU], [CPU]),
        ([CUDA, CPU], [CUDA, CPU]),
        ([TRT, CUDA, CPU], [TRT, CUDA, CPU]),
        # onnxruntime's own order, or providers of other hardware, change nothing.
        ([CPU, CUDA, TRT], [TRT, CUDA, CPU]),
        (["AzureExecutionProvider", CPU], [CPU]),
        (["OpenVINOExecutionProvider", CUDA, CPU], [CUDA, CPU]),
        # TensorRT without CUDA (it never comes so): TensorRT first all the same.
        ([TRT, CPU], [TRT, CPU]),
        # The CPU's provider is always there; it is the fallback even if not listed.
        ([], [CPU]),
    ],
)
def test_the_best_provider_comes_first_and_the_cpu_last(
    backend: Any, available: list[str], chosen: list[str]
) -> None:
    providers = backend.choose_providers(available)
    assert [backend.provider_name(p) for p in providers] == chosen


def test_gpu_providers_run_on_the_instance_device(backend: Any) -> None:
    providers = backend.choose_providers([TRT, CUDA, CPU], device_id=3)
    assert providers == [(TRT, {"device_id": 3}), (CUDA, {"device_id": 3}), CPU]


def test_the_preference_is_tensorrt_then_cuda_then_cpu(backend: Any) -> None:
    assert backend.PREFERRED_PROVIDERS == (TRT, CUDA, CPU)


class FakeOrt:
    """onnxruntime on a host whose libraries of some providers are missing (`broken`), or that
    skips some without a word (`silent`)."""

    def __init__(self, broken: set[str], silent: set[str]) -> None:
        self.broken, self.silent = broken, silent
        self.asked: list[tuple[list[str], dict[str, Any]]] = []

    def InferenceSession(  # onnxruntime's name
        self, path: str, options: Any, *, providers: list[Any], **kwargs: Any
    ) -> Any:
        names = [p if isinstance(p, str) else p[0] for p in providers]
        self.asked.append((names, kwargs))
        if names[0] in self.broken:
            raise RuntimeError(f"Failed to load {names[0]}:\n  more detail\n")
        used = [name for name in names if name not in self.silent]
        return types.SimpleNamespace(get_providers=lambda: used)


@pytest.mark.parametrize(
    ("broken", "silent", "runs_on", "skipped"),
    [
        (set(), set(), TRT, []),
        # onnxruntime-gpu on a host with CUDA and no TensorRT: CUDA, not onnxruntime's own
        # fallback from TensorRT to the CPU.
        ({TRT}, set(), CUDA, [f"{TRT}: Failed to load {TRT}: more detail"]),
        (
            {TRT, CUDA},
            set(),
            CPU,
            [
                f"{TRT}: Failed to load {TRT}: more detail",
                f"{CUDA}: Failed to load {CUDA}: more detail",
            ],
        ),
        (set(), {TRT}, CUDA, [f"{TRT}: not loaded"]),
    ],
)
def test_a_session_runs_on_the_best_provider_that_loads(
    backend: Any,
    monkeypatch: pytest.MonkeyPatch,
    broken: set[str],
    silent: set[str],
    runs_on: str,
    skipped: list[str],
) -> None:
    fake = FakeOrt(broken, silent)
    monkeypatch.setattr(backend, "ort", fake)
    providers = backend.choose_providers([TRT, CUDA, CPU], device_id=1)
    session, reasons = backend.open_session("model.onnx", None, providers)
    assert session.get_providers()[0] == runs_on
    assert reasons == skipped
    # Best first, each with the ones after it as its fallbacks, and none of onnxruntime's own.
    tried = [names for names, _ in fake.asked]
    assert tried == [[TRT, CUDA, CPU], [CUDA, CPU], [CPU]][: len(tried)]
    assert all(kwargs.get("enable_fallback") == 0 for names, kwargs in fake.asked if len(names) > 1)


def identity_model(path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    path.parent.mkdir(parents=True)
    onnx.save(model, path)


def test_a_session_asks_for_what_this_onnxruntime_has_and_logs_it(
    backend: Any, tmp_path: Path
) -> None:
    identity_model(tmp_path / "1" / "model.onnx")
    config = {
        "input": [{"name": "x"}],
        "output": [{"name": "y"}],
        "parameters": {"intra_op_thread_count": {"string_value": "1"}},
    }
    model = backend.TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(config),
            "model_repository": str(tmp_path),
            "model_version": "1",
            "model_name": "clip_image",
            "model_instance_kind": "CPU",
            "model_instance_device_id": "0",
        }
    )
    expected = [
        backend.provider_name(p) for p in backend.choose_providers(ort.get_available_providers())
    ]
    # It runs on the best of those that loaded, with the CPU last: the CPU alone here.
    used = model.session.get_providers()
    assert used[-1] == CPU and used == expected[expected.index(used[0]) :]
    # Each better provider that did not load says why (onnxruntime-gpu on a host without a GPU).
    *warnings, line = Logger.lines
    assert len(warnings) == expected.index(used[0])
    assert all(
        w.startswith("warn: clip_image version 1 (fp32): onnxruntime cannot run on ")
        for w in warnings
    )
    assert line == (
        f"info: clip_image version 1 (fp32): onnxruntime runs on {used[0]} "
        f"(of {', '.join(expected)})"
    )
    model.finalize()


def test_each_version_reads_its_precision_from_its_manifest(backend: Any, tmp_path: Path) -> None:
    models = tmp_path / "clip_text"
    (tmp_path / "manifest-2.json").write_text(json.dumps({"version": 2, "precision": "fp16"}))
    (tmp_path / "manifest-3.json").write_text(json.dumps({"version": 3}))
    assert backend.version_precision(str(models), "2") == "fp16"
    # Manifests from before precisions existed, and a version without one, are fp32.
    assert backend.version_precision(str(models), "3") == "fp32"
    assert backend.version_precision(str(models), "4") == "fp32"


def test_each_encoder_reads_its_own_precision_in_a_mixed_version(
    backend: Any, tmp_path: Path
) -> None:
    # An export asked for fp16 whose image encoder fell short of the floor: TensorRT must
    # not build that fp32 graph in FP16 after all.
    mixed = {"version": 5, "precision": "fp16", "image_precision": "fp32", "text_precision": "fp16"}
    (tmp_path / "manifest-5.json").write_text(json.dumps(mixed))
    assert backend.version_precision(str(tmp_path / "clip_image"), "5") == "fp32"
    assert backend.version_precision(str(tmp_path / "clip_text"), "5") == "fp16"


def test_tensorrt_keeps_an_engine_cache_per_version_and_precision(backend: Any) -> None:
    params = {
        "trt_cache_dir": "/cache",
        "trt_profile_max_shapes": "input_ids:64x77",
        "intra_op_thread_count": "0",
    }
    v1 = backend.tensorrt_options(params, "clip_text", "1", "fp32")
    v2 = backend.tensorrt_options(params, "clip_text", "2", "fp16")
    # onnxruntime keys an engine by file name and graph, not weights: one folder per version.
    assert v1["trt_engine_cache_path"] == "/cache/clip_text/1-fp32"
    assert v2["trt_engine_cache_path"] == "/cache/clip_text/2-fp16"
    assert (v1["trt_fp16_enable"], v2["trt_fp16_enable"]) == ("False", "True")
    assert v1["trt_profile_max_shapes"] == "input_ids:64x77"
    assert "intra_op_thread_count" not in v1
    providers = backend.choose_providers([TRT, CUDA, CPU], device_id=1, tensorrt=v2)
    assert providers[0] == (TRT, {"device_id": 1} | v2)
    assert providers[1] == (CUDA, {"device_id": 1})
    # Without a cache folder (the CPU target on a GPU host) TensorRT builds its engines anew.
    assert "trt_engine_cache_path" not in backend.tensorrt_options({}, "clip_text", "1", "fp32")
