"""Run the real tritonserver binary that the nvidia-pytriton wheel ships, with our repository."""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from core.atomicfile import write_atomic
from core.embedding.manifest import IMAGE_MODEL, TEXT_MODEL

# With a control key, every Triton API that changes the server's state demands this header
# over HTTP; over gRPC Triton expects it under its own prefix (metadata keys are lowercase).
CONTROL_HEADER = "photosearch-control-key"
GRPC_CONTROL_HEADER = f"triton-grpc-protocol-{CONTROL_HEADER}"
# Triton reads the key out of a `categories:header=value` flag: keep it to characters that
# cannot be taken for the flag's separators (token_urlsafe and `openssl rand -hex` qualify).
_KEY_PATTERN = re.compile(r"[A-Za-z0-9_-]{16,}")


# What changes the server: loading and unloading models (model-repository), its log and
# trace settings (logging, trace: a verbose log or a trace of every request fills a disk),
# and registering shared-memory regions. Inference, health, metadata, statistics and the
# models' configuration stay open: the API and the workers hold no key and need no more.
RESTRICTED_APIS = ("model-repository", "logging", "trace", "shared-memory")


def control_flags(key: str) -> list[str]:
    """tritonserver flags that make its state-changing APIs demand `key`, over HTTP and gRPC."""
    restricted = f"{','.join(RESTRICTED_APIS)}:{CONTROL_HEADER}={key}"
    return [f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"]


def grpc_control_headers(key: str) -> dict[str, str]:
    """What a tritonclient.grpc call to load or unload a model sends as `headers=`."""
    return {GRPC_CONTROL_HEADER: key}


def new_control_key() -> str:
    return secrets.token_urlsafe(32)


def control_key_file(work_dir: Path) -> Path:
    """Where a local server started without PHOTOSEARCH_TRITON__CONTROL_KEY keeps its key."""
    return work_dir / "control-key"


def write_control_key(work_dir: Path, key: str) -> Path:
    """The key in a file only its owner reads (write_atomic's temporary file is 0600)."""
    path = control_key_file(work_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, key + "\n")
    return path


def read_control_key(work_dir: Path) -> str | None:
    path = control_key_file(work_dir)
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


class TritonStartError(RuntimeError):
    """tritonserver did not become ready; the message carries the end of its log."""


@dataclass(frozen=True)
class Ports:
    http: int = 8003
    grpc: int = 8001
    metrics: int = 8002


@dataclass(frozen=True)
class TritonInstall:
    """Where the wheel keeps the binary, the python backend and its stubs."""

    binary: Path
    python_backend: Path
    stub: Path
    libs: Path

    @classmethod
    def find(cls) -> TritonInstall:
        spec = importlib.util.find_spec("pytriton")
        if spec is None or spec.origin is None:
            raise TritonStartError(
                "the nvidia-pytriton wheel is not installed: pip install 'photosearch[embedded]'"
            )
        root = Path(spec.origin).parent / "tritonserver"
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        install = cls(
            binary=root / "bin" / "tritonserver",
            python_backend=root / "backends" / "python",
            stub=root / "python_backend_stubs" / py / "triton_python_backend_stub",
            libs=Path(spec.origin).parent.parent / "nvidia_pytriton.libs",
        )
        for path in (install.binary, install.python_backend, install.stub):
            if not path.exists():
                raise TritonStartError(f"{path} is missing from the nvidia-pytriton wheel")
        return install

    def backend_directory(self, under: Path) -> Path:
        """A --backend-directory whose python backend uses the stub for this interpreter."""
        target = under / "python"
        target.mkdir(parents=True, exist_ok=True)
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            link = target / name
            link.unlink(missing_ok=True)
            link.symlink_to(self.python_backend / name)
        # The backend looks for the stub beside itself. Copied under another name and renamed
        # into place: stubs of a killed server may still be running the old file.
        stub = target / "triton_python_backend_stub"
        partial = target / f".stub-{os.getpid()}"
        shutil.copy2(self.stub, partial)
        os.replace(partial, stub)
        return under

    def environment(self) -> dict[str, str]:
        """The stub embeds libpython: give it this interpreter's and this environment's packages."""
        env = dict(os.environ)
        lib_dirs = [str(self.libs)]
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):
            lib_dirs.insert(0, str(sysconfig.get_config_var("LIBDIR")))
        if env.get("LD_LIBRARY_PATH"):
            lib_dirs.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = ":".join(lib_dirs)
        paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = ":".join(dict.fromkeys(paths))
        return env


class TritonServer:
    """One tritonserver process in explicit model-control mode; a context manager."""

    def __init__(
        self,
        repository: Path,
        ports: Ports,
        work_dir: Path,
        *,
        startup_timeout_s: float = 120.0,
        log_path: Path | None = None,
        preexec_fn: Callable[[], None] | None = None,
        control_key: str | None = None,
    ) -> None:
        if control_key is not None and not _KEY_PATTERN.fullmatch(control_key):
            raise ValueError(
                "the Triton control key must be 16 or more letters, digits, '-' or '_'"
            )
        # None: model control is open to whoever reaches the ports (tests' own servers).
        self.control_key = control_key
        self.repository = repository.resolve()
        self.ports = ports
        self.work_dir = work_dir
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path or work_dir / "tritonserver.log"
        self.process: subprocess.Popen[bytes] | None = None
        # A supervisor's hook, e.g. to have the kernel stop Triton when the supervisor dies.
        self.preexec_fn = preexec_fn

    def command(self, install: TritonInstall, backends: Path) -> list[str]:
        models = [
            m for m in (IMAGE_MODEL, TEXT_MODEL) if (self.repository / m / "config.pbtxt").is_file()
        ]
        return [
            str(install.binary),
            f"--model-repository={self.repository}",
            f"--backend-directory={backends}",
            # Explicit control: new versions load (and old ones unload) without a restart.
            "--model-control-mode=explicit",
            *(f"--load-model={m}" for m in models),
            f"--http-port={self.ports.http}",
            f"--grpc-port={self.ports.grpc}",
            f"--metrics-port={self.ports.metrics}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            # Loopback is open to every local process: only the key's holder loads or unloads.
            # tritonserver takes the key on its command line only, so /proc shows it to users
            # of this machine; it keeps out whatever merely reaches the ports.
            *(control_flags(self.control_key) if self.control_key else []),
            # A batch of 64 ViT images is ~10 MB: size the stub's shared memory for it up front.
            "--backend-config=python,shm-default-byte-size=16777216",
            "--backend-config=python,shm-growth-byte-size=16777216",
            "--exit-on-error=true",
            "--log-verbose=0",
        ]

    @property
    def url(self) -> str:
        """gRPC host:port for tritonclient."""
        return f"127.0.0.1:{self.ports.grpc}"

    def start(self) -> TritonServer:
        install = TritonInstall.find()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        backends = install.backend_directory(self.work_dir / "backends")
        log = self.log_path.open("ab")
        # A session of its own, so stop() can take the python-backend stubs down with it.
        self.process = subprocess.Popen(
            self.command(install, backends),
            env=install.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=self.preexec_fn,
        )
        log.close()
        self.wait_ready()
        return self

    def is_ready(self) -> bool:
        url = f"http://127.0.0.1:{self.ports.http}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise TritonStartError(
                    f"tritonserver exited ({self.process.returncode}):\n{self.log_tail()}"
                )
            if self.is_ready():
                return
            time.sleep(0.25)
        self.stop()
        raise TritonStartError(
            f"tritonserver not ready in {self.startup_timeout_s} s:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (Triton drains in-flight requests), then SIGKILL the whole session."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # stubs that outlived the server
        except ProcessLookupError:
            pass
        self.process.wait()
        return self.process.returncode

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
