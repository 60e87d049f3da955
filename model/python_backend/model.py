"""Triton python-backend model: runs this version's model.onnx with onnxruntime on the CPU.

Copied next to model.onnx by `photosearch model export --target cpu`; Triton imports it, so it
depends on nothing but numpy, onnxruntime and Triton's own utilities.
"""

from __future__ import annotations

import json
import os
import site
import sys
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
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
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
