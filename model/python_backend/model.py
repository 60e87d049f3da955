"""Triton python-backend model: runs this version's model.onnx with onnxruntime.

Copied next to model.onnx by `photosearch model export` (both targets); Triton imports it, so
it depends on nothing but numpy, onnxruntime and Triton's own utilities. onnxruntime runs it on
the best execution provider it has: TensorRT, then CUDA (onnxruntime-gpu, the `gpu` extra, on
a GPU host), else the CPU; in the precision the version's manifest names.
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


# onnxruntime 1.23's CPU provider crashes (SIGSEGV) building a session for a float16 graph
# with this graph transformer on (model/precision.py measures fp16 with it off too). It only
# ever touches float16 weights, so the fp32 and int8 versions lose nothing.
FP16_CPU_CRASH = "FuseFp16InitializerToFp32NodeTransformer"


def choose_providers(
    available: Sequence[str], *, device_id: int = 0, tensorrt: dict[str, str] | None = None
) -> list[Provider]:
    """The providers a session asks for, best first: those of PREFERRED_PROVIDERS that
    onnxruntime has (`available`: ort.get_available_providers()), the CPU's always last.
    The GPU ones run on `device_id`; TensorRT takes the `tensorrt` options too."""
    extra = {PREFERRED_PROVIDERS[0]: tensorrt or {}}
    chosen: list[Provider] = [
        (name, {"device_id": device_id} | extra.get(name, {}))
        for name in PREFERRED_PROVIDERS[:-1]
        if name in available
    ]
    return [*chosen, CPU_PROVIDER]


def version_precision(model_repository: str, version: str) -> str:
    """The precision this model serves in this version: its manifest, at the repository root,
    says it per encoder (an encoder below the export's floor serves fp32 beside the other's
    int8 or fp16), or for both in manifests written before that."""
    path = os.path.join(os.path.dirname(model_repository), f"manifest-{version}.json")
    encoder = {"clip_image": "image_precision", "clip_text": "text_precision"}
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return "fp32"
    own = manifest.get(encoder.get(os.path.basename(model_repository.rstrip("/")), ""))
    return str(own or manifest.get("precision", "fp32"))


def tensorrt_options(
    params: dict[str, str], model: str, version: str, precision: str
) -> dict[str, str]:
    """TensorRT's options for one version: its precision, and an engine cache of its own.

    onnxruntime names a cached engine by the model's file name and the graph's structure,
    not its weights: two versions of one architecture would share an engine, and the newer
    would serve the older's weights. So each version and precision gets its own folder.
    """
    options = {"trt_fp16_enable": "True" if precision == "fp16" else "False"}
    cache = params.get("trt_cache_dir")
    if cache:
        options |= {
            "trt_engine_cache_enable": "True",
            "trt_engine_cache_path": os.path.join(cache, model, f"{version}-{precision}"),
        }
    for name in (
        "trt_max_workspace_size",
        "trt_profile_min_shapes",
        "trt_profile_opt_shapes",
        "trt_profile_max_shapes",
    ):
        if params.get(name):
            options[name] = params[name]
    return options


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
            session = ort.InferenceSession(
                path,
                options,
                providers=chain,
                enable_fallback=0,
                disabled_optimizers=[FP16_CPU_CRASH],
            )
        except Exception as exc:  # the provider's libraries, or its device, are not there
            skipped.append(f"{name}: {' '.join(str(exc).split()) or type(exc).__name__}")
            continue
        if session.get_providers()[0] == name:
            return session, skipped
        skipped.append(f"{name}: not loaded")
    # The CPU's: a failure here is the model's, and Triton reports it.
    cpu = ort.InferenceSession(
        path, options, providers=providers[-1:], disabled_optimizers=[FP16_CPU_CRASH]
    )
    return cpu, skipped


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
        name, version = args.get("model_name", "model"), args["model_version"]
        precision = version_precision(args["model_repository"], version)
        # The GPU target's --no-tensorrt (parameter "tensorrt": "0") leaves TensorRT out.
        use_tensorrt = params.get("tensorrt", "1") == "1"
        available = [
            p for p in ort.get_available_providers() if use_tensorrt or p != PREFERRED_PROVIDERS[0]
        ]
        tensorrt = tensorrt_options(params, name, version, precision)
        providers = choose_providers(available, device_id=device_id, tensorrt=tensorrt)
        self.session, skipped = open_session(path, options, providers)
        model = f"{name} version {version} ({precision})"
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
        # A bidirectional text tower's graph has a fixed length (its manifest says "fixed"):
        # padding is the tokenizer's pad id, which the client sends, never zeros from here.
        # Ragged only when it serves beside dynamic-length versions.
        length = self.session.get_inputs()[0].shape[-1]
        self.fixed_length: int | None = length if self.ragged and isinstance(length, int) else None

    def execute(self, requests: list[Any]) -> list[Any]:
        arrays = [
            pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            for request in requests
        ]
        if self.fixed_length is None:
            return self._run(arrays)
        wrong = [a.shape[1] != self.fixed_length for a in arrays]
        ran = iter(self._run([a for a, w in zip(arrays, wrong, strict=True) if not w]))
        error = pb_utils.TritonError(
            f"this model version takes exactly {self.fixed_length} token ids per text"
        )
        return [
            pb_utils.InferenceResponse(output_tensors=[], error=error) if w else next(ran)
            for w in wrong
        ]

    def _run(self, arrays: list[Any]) -> list[Any]:
        """One session.run over the requests' arrays; a response per array, in order."""
        if not arrays:
            return []
        if self.ragged:
            longest = max(a.shape[1] for a in arrays)
            arrays = [np.pad(a, ((0, 0), (0, longest - a.shape[1]))) for a in arrays]
        try:
            outputs = self.session.run(
                [self.output_name], {self.input_name: np.concatenate(arrays)}
            )
        except Exception as exc:  # a bad batch fails its requests, not the server
            error = pb_utils.TritonError(f"onnxruntime failed: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in arrays]
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
