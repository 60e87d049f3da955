"""The commands a user types: export a tiny model, serve it with Triton, stop it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from harness.processes import free_ports, triton_ports
from model.triton_server import grpc_control_headers
from tests.support.models import TINY_CONFIG
from tests.support.waiting import wait_until

CLI = [sys.executable, "-m", "photosearch"]


def _export_tiny(repo: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [*CLI, "model", "export", "--arch", str(TINY_CONFIG), "--pretrained", "none"]
    return subprocess.run(
        [*command, "--repository", str(repo), *options], capture_output=True, text=True, timeout=300
    )


def _processes_mentioning(text: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any(text in arg for arg in p.info["cmdline"] or ())
    ]


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
    wait_until(
        lambda: _processes_mentioning(str(work)) == [],
        60,
        lambda: f"Triton's processes gone: {_processes_mentioning(str(work))}",
    )


def test_a_text_queue_delay_over_10_ms_is_refused(tmp_path: Path) -> None:
    result = _export_tiny(tmp_path, "--text-queue-delay-us", "20000")
    assert result.returncode == 2
    assert "text-queue-delay-us" in result.stderr
    assert not list(tmp_path.iterdir())


def _offline_export(repo: Path, *options: str) -> subprocess.CompletedProcess[str]:
    # An empty Hugging Face cache: the weights are certainly not on this machine.
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(repo.parent / "hf-home"))
    export = ["model", "export", "--arch", "ViT-B-32", "--pretrained", "laion2b_s34b_b79k"]
    return subprocess.run(
        [*CLI, *options, *export, "--repository", str(repo)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_an_offline_pretrained_tag_fails_with_one_short_line(tmp_path: Path) -> None:
    """What failed, why in one clause, what to do; open_clip's nested errors only at debug."""
    result = _offline_export(tmp_path / "models")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("export failed: could not load weights 'laion2b_s34b_b79k'"), line
    assert "could not be downloaded" in line
    assert "--pretrained PATH" in line and "--pretrained none" in line
    assert "Internet connection" not in line and len(line) < 240, line

    detailed = _offline_export(tmp_path / "models", "--debug")
    assert detailed.returncode == 2
    assert "Failed to download" in detailed.stderr  # the detail, for whoever asks for it
    assert detailed.stderr.strip().splitlines()[-1] == line


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="120", NO_COLOR="1", **env),
    )


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (
            ["up"],
            {
                "--port": "PHOTOSEARCH_API__PORT, 8000",
                "--host": "PHOTOSEARCH_API__HOST",
                "--data-dir": "PHOTOSEARCH_DATA_DIR",
                "--redis-port": "6379 if free",
                "--arch": "ViT-B-32",
            },
        ),
        (["api", "serve"], {"--host": "PHOTOSEARCH_API__HOST", "--port": "PHOTOSEARCH_API__PORT"}),
        (["index", "reindex"], {"--source": "the last synced source"}),
        (
            ["worker"],
            {
                "--queues": "all",
                "--concurrency": "PHOTOSEARCH_INDEXER__CONCURRENCY",
                "--loglevel": "INFO",
            },
        ),
    ],
)
def test_help_shows_every_default(command: list[str], shown: dict[str, str]) -> None:
    result = _cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert " ." not in result.stdout  # what Rich left of a "[default: ...]" it read as markup
    lines = result.stdout.splitlines()
    for option, default in shown.items():
        # The option's line, and the line after it where Rich wraps a long default.
        at = next(i for i, line in enumerate(lines) if f" {option} " in line)
        assert default in " ".join(lines[at : at + 2]), (option, result.stdout)


@pytest.mark.parametrize(
    ("command", "choices"),
    [
        (["api", "key"], "search|admin"),
        (["worker"], "info|warning"),
        (["model", "export"], "cpu|gpu"),
    ],
)
def test_help_lists_the_choices(command: list[str], choices: str) -> None:
    result = _cli(*command, "--help")
    assert choices in result.stdout.lower(), result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["api", "key", "someone", "--scope", "root"],
        ["worker", "--loglevel", "LOUD"],
        ["model", "export", "--target", "tpu"],
    ],
)
def test_an_invalid_choice_is_refused(command: list[str]) -> None:
    result = _cli(*command)
    assert result.returncode == 2
    assert "Invalid value" in result.stderr


def test_unreachable_redis_is_one_line_naming_it_and_its_setting() -> None:
    (port,) = free_ports(1)  # nothing listens there
    url = f"redis://someone:hunter2@127.0.0.1:{port}/0"
    # Retried for a second (the setting's limit), said once, then given up with the one line.
    result = _cli(
        "index", "status", PHOTOSEARCH_REDIS__URL=url, PHOTOSEARCH_LIFECYCLE__RECONNECT_S="1"
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    retrying, gave_up = lines
    assert retrying.startswith(f"lost Redis at redis://someone:***@127.0.0.1:{port}/0 ")
    assert "retrying for up to 1 s (PHOTOSEARCH_LIFECYCLE__RECONNECT_S)" in retrying
    assert "Redis" in gave_up and "PHOTOSEARCH_REDIS__URL" in gave_up
    assert f"127.0.0.1:{port}" in gave_up
    assert "hunter2" not in result.stderr
