"""The GPU check, run here with --device cpu on the tests' tiny CLIP: its table, its copies of
the exported encoders, the python backend's zero model on a real tritonserver, and --prepare.
No timing is held to a threshold: a rate only has to be a positive number."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from harness.models import TINY_CONFIG
from loadtests import bench_gpu, gpu_triton
from model.encoders import ImageEncoder, TextEncoder

ROW = re.compile(r"^\| (image|text \d+) \| (fp32|tf32|fp16) \| (\d+) \| ([\d,.]+) \| ([\d,.]+) \|$")


def test_a_cpu_run_has_a_row_per_encoder_precision_and_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gpu.json"
    argv = ["--device", "cpu", "--arch", str(TINY_CONFIG), "--precisions", "fp32,fp16"]
    argv += ["--image-batches", "1,3", "--text-batches", "1,4", "--text-lengths", "77,8"]
    argv += ["--seconds", "0.01", "--repeats", "1", "--warmup", "1", "--threads", "1"]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert bench_gpu.main([*argv, "--no-triton", "--json", str(out)]) == 0
        # Measured with one thread, and the process's count given back after: a test that
        # trains the tiny model next in this process must not inherit it.
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)

    printed = capsys.readouterr().out
    rows = [m.groups() for m in map(ROW.match, printed.splitlines()) if m]
    expected = {
        (encoder, precision, batch)
        for precision in ("fp32", "fp16")
        for encoder, batches in (("image", "13"), ("text 77", "14"), ("text 8", "14"))
        for batch in batches
    }
    assert {(e, p, b) for e, p, b, _, _ in rows} == expected
    assert len(rows) == len(expected)
    assert all(float(rate.replace(",", "")) > 0 for *_, rate, _ in rows)
    assert all(float(ms.replace(",", "")) > 0 for *_, ms in rows)
    assert "torch: " in printed and "not the production ONNX/TensorRT path" in printed

    found = json.loads(out.read_text())
    assert len(found["encoders"]) == len(expected) and found["skipped"] == []
    assert all(r["items_per_s"] > 0 and r["ms_per_batch"] > 0 for r in found["encoders"])
    assert "triton" not in found
    assert found["environment"]["device"].endswith(", 1 threads")


def test_the_budget_skips_the_rows_it_has_no_time_for(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--device", "cpu", "--arch", str(TINY_CONFIG), "--precisions", "fp32"]
    argv += ["--image-batches", "1", "--text-batches", "1", "--budget-s", "0", "--no-triton"]
    assert bench_gpu.main(argv) == 0
    printed = capsys.readouterr().out
    assert not [line for line in printed.splitlines() if ROW.match(line)]
    assert "Skipped (past --budget-s 0): image fp32 batch 1, text 77 fp32 batch 1" in printed


def test_the_timed_copies_embed_as_the_exported_encoders_do() -> None:
    clip = bench_gpu.load_clip(str(TINY_CONFIG))
    image, text = bench_gpu.encoders(clip)
    pixels = torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8)
    ids = bench_gpu.token_ids(4, 8, clip.token_embedding.num_embeddings, seed=1)
    padded = torch.nn.functional.pad(ids, (0, 77 - 8))
    with torch.inference_mode():
        exported_image = ImageEncoder(clip, bench_gpu.MEAN, bench_gpu.STD)(pixels)
        torch.testing.assert_close(image(pixels), exported_image)
        torch.testing.assert_close(text(ids), TextEncoder(clip)(ids))
        # Cut to the longest query, the embedding is open_clip's at the full 77 tokens.
        full = torch.nn.functional.normalize(clip.encode_text(padded), dim=-1)
        torch.testing.assert_close(text(ids), full, atol=1e-6, rtol=1e-5)


def test_token_ids_are_queries_between_start_and_end_of_text() -> None:
    ids = bench_gpu.token_ids(6, 9, vocab=100, seed=3)
    assert ids.shape == (6, 9) and ids[0, -1] == 99  # the first query sets the batch's length
    for row in ids.tolist():
        end = row.index(99)
        assert row[0] == 98 and all(0 < t < 98 for t in row[1:end]) and set(row[end + 1 :]) <= {0}


def test_the_python_backend_answers_every_batch_from_a_real_tritonserver() -> None:
    found = gpu_triton.measure_overhead(
        None, image_size=32, dim=32, image_batches=[1, 4], text_concurrency=[1, 3],
        seconds=0.05, log=print,
    )  # fmt: skip
    assert "skipped" not in found, found
    rows = found["rows"]
    assert [(r["model"], r["batch"], r["concurrency"]) for r in rows] == [
        ("text", 1, 1), ("text", 1, 3), ("image", 1, 1), ("image", 4, 1),
    ]  # fmt: skip
    assert all(r["requests_per_s"] > 0 and r["p50_ms"] > 0 for r in rows)
    assert all(r["items_per_s"] == pytest.approx(r["requests_per_s"] * r["batch"]) for r in rows)
    table = gpu_triton.overhead_table(found)
    assert table.count("\n| image | ") == 2 and table.count("\n| text | ") == 2


def test_a_server_that_cannot_start_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / gpu_triton.TARBALL).write_bytes(b"not a tarball")
    found = gpu_triton.measure_overhead(
        tmp_path, image_size=32, dim=32, image_batches=[1], text_concurrency=[1],
        seconds=0.01, log=print,
    )  # fmt: skip
    assert set(found) == {"skipped"} and found["skipped"]
    assert gpu_triton.overhead_table(found).endswith(f"Skipped: {found['skipped']}\n")


def test_prepare_copies_open_clip_and_what_it_imports(tmp_path: Path) -> None:
    folder = tmp_path / "carry"
    size = bench_gpu.prepare(folder, triton=False)
    assert (folder / "open_clip" / "model_configs" / "ViT-B-32.json").is_file()
    assert (folder / "ftfy" / "__init__.py").is_file()
    assert (folder / "wcwidth" / "__init__.py").is_file()
    assert not list(folder.rglob("__pycache__"))
    assert size == bench_gpu.folder_bytes(folder) and size < bench_gpu.CARRY_LIMIT // 4
    with pytest.raises(SystemExit, match="no open_clip"):
        bench_gpu.use_carried(tmp_path)
    bench_gpu.prepare(folder, triton=False)  # an earlier carry is replaced
    (folder / "notes.txt").write_text("someone else's")
    with pytest.raises(SystemExit, match=r"notes\.txt"):
        bench_gpu.prepare(folder, triton=False)
    assert (folder / "notes.txt").is_file()


def test_the_packed_server_is_the_wheels_binary_backend_stubs_and_libraries() -> None:
    site = gpu_triton.installed_site()
    assert site is not None
    files = [str(p) for p in gpu_triton.wheel_files(site)]
    assert "pytriton/tritonserver/bin/tritonserver" in files
    assert "pytriton/tritonserver/backends/python" in files
    assert "pytriton/tritonserver/python_backend_stubs/3.12" in files
    assert any(f.startswith("nvidia_pytriton.libs/libtritonserver") for f in files)
    assert not [f for f in files if "libpython" in f]
