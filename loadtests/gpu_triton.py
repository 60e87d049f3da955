"""Triton's python backend's own overhead on a lent host: bench_gpu's second half.

The pytriton wheel's tritonserver serves two models that return zeros (no encoder), shaped as
ours: uint8 NHWC images, int64 token ids of any length, float32 embeddings out. What a call
costs is then all Triton's: HTTP, the scheduler, the stub's shared memory both ways. The
client is plain HTTP with Triton's binary-tensor extension (urllib's http.client): tritonclient
is not on the host and there is no room to carry it. Production calls over gRPC; the python
backend's part is the same.

pack() (run here) puts the server, the python backend, its stubs and their libraries, as the
wheel lays them out, into one xz tarball (about 27 MB; the wheel is 55 MB); the host unpacks
it into a temporary folder. Stdlib and numpy only: nothing of the project's.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

TARBALL = "tritonserver.tar.xz"
SERVER = Path("pytriton", "tritonserver")
LIBS = Path("nvidia_pytriton.libs")

MODEL_PY = '''"""Returns zeros: what is left of a call is Triton's and the python backend's."""
import json, os, site, sys
_before = list(sys.path)  # the stub starts isolated: numpy is on PYTHONPATH (model/python_backend)
for _path in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if _path:
        site.addsitedir(_path)
sys.path[:] = [p for p in sys.path if p not in _before] + _before
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dim = json.loads(args["model_config"])["output"][0]["dims"][0]

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            zeros = np.zeros((x.shape[0], self.dim), np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", zeros)]))
        return out
'''

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 256
input [{{ name: "INPUT", data_type: {dtype}, dims: [{dims}] }}]
output [{{ name: "OUTPUT", data_type: TYPE_FP32, dims: [{dim}] }}]
instance_group [{{ kind: KIND_CPU, count: 1 }}]
dynamic_batching {{ max_queue_delay_microseconds: 0 }}
"""


def wheel_files(site: Path) -> list[Path]:
    """What the server needs of an installed pytriton, relative to its site-packages: the
    bundled libpython 3.13 (31 MB) is left out, as the stubs use the host's own."""
    server = [SERVER / "bin" / "tritonserver", SERVER / "backends" / "python"]
    stubs = [p.relative_to(site) for p in (site / SERVER / "python_backend_stubs").iterdir()]
    libs = [p.relative_to(site) for p in (site / LIBS).iterdir() if "libpython" not in p.name]
    return server + sorted(stubs) + sorted(libs)


def installed_site() -> Path | None:
    spec = importlib.util.find_spec("pytriton")
    return None if spec is None or spec.origin is None else Path(spec.origin).parent.parent


def pack(folder: Path) -> None:
    site = installed_site()
    if site is None:
        raise SystemExit("nvidia-pytriton is not installed here: pip install nvidia-pytriton")
    with tarfile.open(folder / TARBALL, "w:xz") as tar:
        for path in wheel_files(site):
            tar.add(site / path, arcname=str(path))


def server_site(carried: Path | None, scratch: Path) -> Path:
    """The carried tarball unpacked into `scratch`, else this environment's pytriton."""
    if carried is not None and (carried / TARBALL).is_file():
        with tarfile.open(carried / TARBALL) as tar:
            tar.extractall(scratch, filter="tar")  # our own tarball, links as the wheel has them
        return scratch
    site = installed_site()
    if site is None:
        raise RuntimeError("no tritonserver: carry it (--prepare without --no-triton)")
    return site


def repository(root: Path, image_size: int, dim: int) -> Path:
    models = {
        "image": ("TYPE_UINT8", f"{image_size}, {image_size}, 3"),
        "text": ("TYPE_INT64", "-1"),
    }
    for name, (dtype, dims) in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(MODEL_PY)
        config = CONFIG.format(name=name, dtype=dtype, dims=dims, dim=dim)
        (root / name / "config.pbtxt").write_text(config)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(site: Path, repo: Path, work: Path) -> tuple[subprocess.Popen[bytes], int]:
    """tritonserver on free ports with a backend folder holding this interpreter's stub."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = site / SERVER / "python_backend_stubs" / python / "triton_python_backend_stub"
    if not stub.is_file():
        raise RuntimeError(f"the wheel has no python backend stub for Python {python}")
    backend = work / "backends" / "python"
    backend.mkdir(parents=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        (backend / name).symlink_to(site / SERVER / "backends" / "python" / name)
    shutil.copy2(stub, backend / stub.name)
    env = dict(os.environ)
    libdir = str(sysconfig.get_config_var("LIBDIR"))  # the stub loads libpython3.X from here
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [libdir, str(site / LIBS), env.get("LD_LIBRARY_PATH", "")]
    )
    paths = sysconfig.get_paths()
    env["PYTHONPATH"] = os.pathsep.join(
        [paths["purelib"], paths["platlib"], env.get("PYTHONPATH", "")]
    )
    http_port = free_port()
    command = [
        str(site / SERVER / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={work / 'backends'}",
        f"--http-port={http_port}",
        f"--grpc-port={free_port()}",
        f"--metrics-port={free_port()}",
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--backend-config=python,shm-default-byte-size=16777216",  # as model/triton_server.py
        "--backend-config=python,shm-growth-byte-size=16777216",
    ]
    with (work / "tritonserver.log").open("wb") as log:  # the server keeps its own copy
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    return process, http_port


def wait_ready(process: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/v2/health/ready")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-1500:]
    raise RuntimeError(f"tritonserver did not become ready (exit {process.poll()}): {tail}")


class Caller:
    """One keep-alive connection; tensors as raw bytes after the JSON (the binary extension)."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def infer(self, model: str, array: np.ndarray[Any, Any], dim: int) -> None:
        dtype = {np.dtype(np.uint8): "UINT8", np.dtype(np.int64): "INT64"}[array.dtype]
        raw = array.tobytes()
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": "INPUT",
                        "shape": list(array.shape),
                        "datatype": dtype,
                        "parameters": {"binary_data_size": len(raw)},
                    }
                ],
                "outputs": [{"name": "OUTPUT", "parameters": {"binary_data": True}}],
            }
        ).encode()
        headers = {"Inference-Header-Content-Length": str(len(header))}
        self.connection.request("POST", f"/v2/models/{model}/infer", header + raw, headers)
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{model}: HTTP {response.status}: {body[:300]!r}")
        length = int(response.getheader("Inference-Header-Content-Length", "0"))
        shape = json.loads(body[:length])["outputs"][0]["shape"]
        if shape != [array.shape[0], dim] or len(body) - length != array.shape[0] * dim * 4:
            raise RuntimeError(f"{model}: answered shape {shape}, not [{array.shape[0]}, {dim}]")


def drive(
    port: int,
    model: str,
    array: np.ndarray[Any, Any],
    dim: int,
    *,
    concurrency: int,
    seconds: float,
) -> dict[str, Any]:
    """`concurrency` callers, one request after another each, for `seconds`."""
    latencies: list[float] = []
    lock = threading.Lock()
    began: list[float] = []  # when every caller had warmed up
    ready = threading.Barrier(concurrency, action=lambda: began.append(time.monotonic()))
    errors: list[BaseException] = []  # a caller's failure stops the others at the barrier

    def caller() -> None:
        call = Caller(port)
        mine: list[float] = []
        try:
            for _ in range(3):  # warm-up: the connection, the stub's shared memory
                call.infer(model, array, dim)
            ready.wait()
            while not mine or time.monotonic() < began[0] + seconds:  # one call at least
                start = time.perf_counter()
                call.infer(model, array, dim)
                mine.append(time.perf_counter() - start)
        except (OSError, RuntimeError) as exc:  # BrokenBarrierError too: another one failed
            errors.append(exc)
            ready.abort()
        finally:
            call.connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=caller) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        first = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise RuntimeError(f"{model} batch {array.shape[0]}: {(first or errors)[0]}")
    elapsed = max(time.monotonic() - began[0], 1e-9)
    ordered = sorted(latencies)
    return {
        "model": model,
        "batch": int(array.shape[0]),
        "concurrency": concurrency,
        "requests_per_s": len(latencies) / elapsed,
        "items_per_s": len(latencies) * int(array.shape[0]) / elapsed,
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3,
    }


def measure_overhead(
    carried: Path | None,
    *,
    image_size: int,
    dim: int,
    image_batches: Sequence[int],
    text_concurrency: Sequence[int],
    seconds: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Rows of the zero model's calls, or {"skipped": why}: the encoders' figures stand alone."""
    with tempfile.TemporaryDirectory(prefix="bench-gpu-triton-") as scratch:
        work = Path(scratch)
        process = None
        try:
            site = server_site(carried, work / "site")
            repo = repository(work / "models", image_size, dim)
            process, port = start(site, repo, work)
            log("tritonserver: starting ...")
            wait_ready(process, port, work / "tritonserver.log", timeout_s=120)
            rng = np.random.default_rng(0)
            ids = np.array([[49406, *rng.integers(1, 49000, 6), 49407, *[0] * 8]], np.int64)
            rows = [
                drive(port, "text", ids, dim, concurrency=c, seconds=seconds)
                for c in text_concurrency
            ]
            for batch in image_batches:
                pixels = rng.integers(0, 256, (batch, image_size, image_size, 3), np.uint8)
                rows.append(drive(port, "image", pixels, dim, concurrency=1, seconds=seconds))
            return {"rows": rows}
        except (OSError, RuntimeError, tarfile.TarError) as exc:
            log(f"tritonserver: skipped: {exc}")
            return {"skipped": str(exc)}
        finally:
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def overhead_table(found: dict[str, Any]) -> str:
    title = "## Triton's python backend, a model returning zeros (HTTP, binary tensors)\n\n"
    if "skipped" in found:
        return title + f"Skipped: {found['skipped']}\n"
    lines = [
        "| model | batch | concurrency | requests/s | items/s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['model']} | {r['batch']} | {r['concurrency']} | {r['requests_per_s']:,.0f} "
        f"| {r['items_per_s']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |"
        for r in found["rows"]
    ]
    return title + "\n".join(lines) + "\n"
