"""The commands a user types: export a tiny model, serve it with Triton, stop it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from model.triton_server import grpc_control_headers
from tests.support.models import TINY_CONFIG
from tests.support.ports import triton_ports

CLI = [sys.executable, "-m", "photosearch"]


def _export_tiny(repo: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [*CLI, "model", "export", "--arch", str(TINY_CONFIG), "--pretrained", "none"]
    return subprocess.run(
        [*command, "--repository", str(repo), *options], capture_output=True, text=True, timeout=300
    )


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if text.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_export_then_serve_answers_both_models_and_stops_on_sigterm(tmp_path: Path) -> None:
    repo, work = tmp_path / "models", tmp_path / "triton-work"
    export = _export_tiny(repo, "--text-queue-delay-us", "2000")
    assert export.returncode == 0, export.stderr
    assert "exported version 1" in export.stdout
    assert "random weights" in export.stdout

    ports = triton_ports()
    serve = subprocess.Popen(
        [
            *CLI,
            "triton",
            "serve",
            "--repository",
            str(repo),
            "--work-dir",
            str(work),
            "--http-port",
            str(ports.http),
            "--grpc-port",
            str(ports.grpc),
            "--metrics-port",
            str(ports.metrics),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert "Triton ready" in line, line + serve.stdout.read()
        # No PHOTOSEARCH_TRITON__CONTROL_KEY: a key of this start, in a file of its owner's.
        key_file = work / "control-key"
        assert serve.stdout.readline().split(": ", 1)[1].strip() == str(key_file)
        assert key_file.stat().st_mode & 0o777 == 0o600
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports.grpc}")
        with pytest.raises(InferenceServerException, match="restricted"):
            client.unload_model("clip_text")
        key = key_file.read_text().strip()
        client.load_model("clip_text", headers=grpc_control_headers(key))
        ids = grpcclient.InferInput("input_ids", [1, 4], "INT64")
        ids.set_data_from_numpy(np.array([[49406, 320, 2368, 49407]], dtype=np.int64))
        text = client.infer("clip_text", [ids], model_version="1").as_numpy("text_embeds")
        image = grpcclient.InferInput("image", [2, 32, 32, 3], "UINT8")
        image.set_data_from_numpy(
            np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
        )
        pictures = client.infer("clip_image", [image], model_version="1").as_numpy("image_embeds")
        assert text.shape == (1, 32) and pictures.shape == (2, 32)
        np.testing.assert_allclose(
            np.linalg.norm(np.concatenate([text, pictures]), axis=1), 1.0, atol=1e-5
        )
        client.close()
        assert _processes_mentioning(str(work))  # tritonserver and its python stubs
    finally:
        serve.send_signal(signal.SIGTERM)
        rest, _ = serve.communicate(timeout=60)
    assert serve.returncode == 0, rest
    assert "Triton stopped" in rest
    assert not key_file.exists()
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(work)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_mentioning(str(work)) == []


def test_a_text_queue_delay_over_10_ms_is_refused(tmp_path: Path) -> None:
    result = _export_tiny(tmp_path, "--text-queue-delay-us", "20000")
    assert result.returncode == 2
    assert "text-queue-delay-us" in result.stderr
    assert not list(tmp_path.iterdir())


def test_an_offline_pretrained_tag_fails_with_a_clear_message(tmp_path: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [
            *CLI,
            "model",
            "export",
            "--arch",
            "ViT-B-32",
            "--pretrained",
            "laion2b_s34b_b79k",
            "--repository",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 2
    assert "--pretrained none" in result.stderr
