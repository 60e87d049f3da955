"""Triton python-backend model: runs this version's model.onnx with onnxruntime.

Copied next to model.onnx by `photosearch model export --target cpu`; Triton imports it, so it
depends on nothing but numpy, onnxruntime and Triton's own utilities. onnxruntime runs it on
the best execution provider it has: TensorRT, then CUDA (onnxruntime-gpu, the `gpu` extra, on
a GPU host), else the CPU.
"""

from __future__ import annotations

import json
import os
import site
import sys
from collections.abc import Sequence
from typing import Any

# The stub starts its Python isolated from PYTHONPATH and with the base interpreter's
# site-packages; put PYTHONPATH (photosearch triton serve sets it to its virtual environment)
# first, or a base numpy of another major version shadows the one onnxruntime was built with.
_before = list(sys.path)
for _path in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if _path:
        site.addsitedir(_path)
sys.path[:] = [p for p in sys.path if p not in _before] + _before

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]  # noqa: E402

# onnxruntime's execution providers, best first. The CPU's is always there, and stays last in
# the list a session gets: nodes the ones before it cannot run fall back to it.
PREFERRED_PROVIDERS = (
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "CPUExecutionProvider",
)
CPU_PROVIDER = PREFERRED_PROVIDERS[-1]

# A provider as a session takes it: its name, or its name and options.
Provider = str | tuple[str, dict[str, Any]]


def choose_providers(available: Sequence[str], *, device_id: int = 0) -> list[Provider]:
    """The providers a session asks for, best first: those of PREFERRED_PROVIDERS that
    onnxruntime has (`available`: ort.get_available_providers()), the CPU's always last.
    The GPU ones run on `device_id`."""
    chosen: list[Provider] = [
        (name, {"device_id": device_id}) for name in PREFERRED_PROVIDERS[:-1] if name in available
    ]
    return [*chosen, CPU_PROVIDER]


def provider_name(provider: Provider) -> str:
    return provider if isinstance(provider, str) else provider[0]


def open_session(path: str, options: Any, providers: list[Provider]) -> tuple[Any, list[str]]:
    """A session on the first of `providers` that loads, with the ones after it as its
    fallbacks; and why each better one did not load. onnxruntime lists the GPU providers that
    onnxruntime-gpu was built with whether or not the host has their libraries (TensorRT is
    installed apart from CUDA), and its own fallback goes from TensorRT straight to the CPU,
    past a CUDA that works: so each is tried here, best first."""
    skipped: list[str] = []
    for first in range(len(providers) - 1):
        chain = providers[first:]
        name = provider_name(chain[0])
        try:
            session = ort.InferenceSession(path, options, providers=chain, enable_fallback=0)
        except Exception as exc:  # the provider's libraries, or its device, are not there
            skipped.append(f"{name}: {' '.join(str(exc).split()) or type(exc).__name__}")
            continue
        if session.get_providers()[0] == name:
            return session, skipped
        skipped.append(f"{name}: not loaded")
    # The CPU's: a failure here is the model's, and Triton reports it.
    return ort.InferenceSession(path, options, providers=providers[-1:]), skipped


class TritonPythonModel:
    """One onnxruntime session per instance; a Triton batch becomes one session.run."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_thread_count", "0"))
        options.inter_op_num_threads = 1
        # Both models' stubs, the API and the worker share the CPU: idle onnxruntime threads
        # that spin-wait for the next op take the cores the other model needs (a search
        # slowed several times during a sync); blocking costs microseconds per op instead.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        # A KIND_GPU instance has its device; the CPU target's KIND_CPU instances take GPU 0.
        gpu = args.get("model_instance_kind") == "GPU"
        device_id = int(args.get("model_instance_device_id", "0")) if gpu else 0
        providers = choose_providers(ort.get_available_providers(), device_id=device_id)
        self.session, skipped = open_session(path, options, providers)
        model = f"{args.get('model_name', 'model')} version {args['model_version']}"
        for reason in skipped:
            pb_utils.Logger.log_warn(f"{model}: onnxruntime cannot run on {reason}")
        used = self.session.get_providers()
        pb_utils.Logger.log_info(
            f"{model}: onnxruntime runs on {used[0]} "
            f"(of {', '.join(map(provider_name, providers))})"
        )
        self.input_name: str = config["input"][0]["name"]
        self.output_name: str = config["output"][0]["name"]
        # Token-id inputs arrive ragged (allow_ragged_batch); zeros after the end-of-text
        # token do not change a causal encoder's output, so a batch pads to its longest.
        self.ragged: bool = bool(config["input"][0].get("allow_ragged_batch", False))

    def execute(self, requests: list[Any]) -> list[Any]:
        arrays = [
            pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            for request in requests
        ]
        if self.ragged:
            longest = max(a.shape[1] for a in arrays)
            arrays = [np.pad(a, ((0, 0), (0, longest - a.shape[1]))) for a in arrays]
        try:
            outputs = self.session.run(
                [self.output_name], {self.input_name: np.concatenate(arrays)}
            )
        except Exception as exc:  # a bad batch fails its requests, not the server
            error = pb_utils.TritonError(f"onnxruntime failed: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        responses = []
        start = 0
        for array in arrays:
            rows = outputs[0][start : start + array.shape[0]]
            start += array.shape[0]
            tensor = pb_utils.Tensor(self.output_name, rows.copy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses

    def finalize(self) -> None:
        self.session = None
