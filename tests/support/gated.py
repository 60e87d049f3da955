"""A real Triton whose clip_image executions a test holds and logs (the gate), so a test
decides when Triton may take its next batch: no sleeps, no race."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.embedding.manifest import IMAGE_MODEL
from harness.observe import fetch_text
from harness.processes import triton_ports
from model.repository import PYTHON_BACKEND, version_dir
from model.triton_server import TritonServer
from tests.support.api import sample

# Wraps the served python-backend model: logs each execution's requests by their first pixel
# (a tag the test gives each request) and holds the instance while the gate file exists, so
# that the test decides when Triton may pick its next batch (no sleeps, no race).
GATED_MODEL = """
import importlib.util, json, os, time

_here = os.path.dirname(__file__)
_spec = importlib.util.spec_from_file_location("served", os.path.join(_here, "served.py"))
served = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(served)
pb_utils = served.pb_utils


class TritonPythonModel(served.TritonPythonModel):
    def initialize(self, args):
        super().initialize(args)
        self.gate = os.path.join(args["model_repository"], "..", "gate")

    def execute(self, requests):
        tags = [
            int(pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy().flat[0])
            for r in requests
        ]
        with open(os.path.join(self.gate + "-log"), "a") as log:
            log.write(json.dumps(tags) + "\\n")
        give_up = time.monotonic() + 120  # a failed test must not hang Triton
        while os.path.exists(self.gate) and time.monotonic() < give_up:
            time.sleep(0.01)
        return super().execute(requests)
"""


@dataclass
class Gated:
    """A Triton whose clip_image executions the test holds and logs."""

    server: TritonServer
    repository: Path

    @property
    def gate(self) -> Path:
        return self.repository / "gate"

    def executions(self) -> list[list[int]]:
        log = self.repository / "gate-log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def pending(self) -> float:
        """Requests Triton holds for clip_image that no execution has taken yet."""
        text = fetch_text(f"http://127.0.0.1:{self.server.ports.metrics}/metrics")
        return sample(text, "nv_inference_pending_request_count", model=IMAGE_MODEL)


@contextmanager
def gated_triton(repository: Path, work: Path) -> Iterator[Gated]:
    """A Triton serving a copy of `repository` (version 1) with clip_image gated."""
    repo = work / "models"
    shutil.copytree(repository, repo)
    version = version_dir(repo, IMAGE_MODEL, 1)
    shutil.copyfile(PYTHON_BACKEND, version / "served.py")
    (version / "model.py").write_text(GATED_MODEL)
    with TritonServer(repo, triton_ports(), work / "triton") as server:
        yield Gated(server, repo)
