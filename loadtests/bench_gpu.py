"""The encoders' ceiling on a lent GPU host, in PyTorch, and Triton's python backend's overhead.

    python -m loadtests.bench_gpu --prepare var/gpu-carry        # here: what the host lacks
    python -m loadtests.bench_gpu --carried var/gpu-carry --json OUT.json     # on the GPU host
    python -m loadtests.bench_gpu --device cpu --arch tests/data/tiny-clip.json --seconds 0.1

A GPU host is lent rarely and briefly, with PyTorch (CUDA), torchvision and numpy but no
open_clip, no TensorRT, no onnxruntime for GPUs, no Triton and no network; 64 MiB travel beside
the working tree. So this measures what can honestly be measured there:

- each encoder's throughput by batch size in fp32 and fp16 in **PyTorch on CUDA**: the ceiling
  the capacity plan assumes, not the production path (the python backend running the ONNX
  export in onnxruntime with TensorRT or CUDA). Weights are random (none can be downloaded):
  throughput does not depend on their values, only on the architecture's shapes. Inputs are
  already on the device (the copy in is the client's and Triton's part); the image encoder
  takes uint8 NHWC pixels and normalizes them, the text encoder runs at the fixed 77 tokens
  and cut to the batch's longest query, as the export does (model/encoders.py; a test checks
  that these copies embed alike). fp16 is the whole model in half precision (as an fp16 export
  or TensorRT FP16); fp32 is PyTorch's default, TF32 off for matmuls (`tf32` allows it, as
  TensorRT's fp32 does). Each row: warm-up, then the median of --repeats timed loops with the
  device synchronised before and after each loop.
- the python backend's own overhead (loadtests/gpu_triton.py): the pytriton wheel's
  tritonserver serving a model that returns zeros, over plain HTTP (no tritonclient: the
  wheel's 27 MB, compressed, leaves no room for it), at single queries and the indexer's
  batches. It fits beside open_clip (about 6 MB) under the 64 MiB limit.

--prepare (here, where pip works) copies open_clip, ftfy and wcwidth (pure Python) into a
folder and packs tritonserver, its python backend, the stubs and their libraries from the
installed pytriton; --carried puts that folder on sys.path and unpacks the server into /tmp.
Nothing here imports the project's packages (pydantic is not on the host). Prints Markdown;
no thresholds.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

CARRIED_PACKAGES = ("open_clip", "ftfy", "wcwidth")  # what open_clip imports that hosts lack
CARRY_LIMIT = 64 * 2**20  # the lent host's limit on the working tree plus what is carried
PRECISIONS = ("fp32", "tf32", "fp16")
# CLIP's pixel mean and std, rounded: only the arithmetic counts here.
MEAN, STD = (0.48, 0.46, 0.41), (0.27, 0.26, 0.28)


@dataclass(frozen=True)
class Row:
    encoder: str  # "image", "text 77" (fixed length) or "text N" (cut to the longest, N)
    precision: str
    batch: int
    items_per_s: float
    ms_per_batch: float


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_gpu", description=__doc__)
    p.add_argument("--prepare", type=Path, help="write what the GPU host needs into DIR, exit")
    p.add_argument(
        "--no-triton", action="store_true", help="skip Triton (and, with --prepare, packing it)"
    )
    p.add_argument("--carried", type=Path, help="the folder --prepare wrote, on the GPU host")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--arch", default="ViT-B-32", help="an open_clip name or a config JSON")
    p.add_argument("--precisions", default="fp32,fp16", help=f"of {','.join(PRECISIONS)}")
    p.add_argument("--image-batches", type=ints, default=ints("1,8,32,64,128,256"))
    p.add_argument("--text-batches", type=ints, default=ints("1,8,32,128"))
    p.add_argument(
        "--text-lengths",
        type=ints,
        default=ints("77,16"),
        help="77: open_clip's fixed context; less: a batch cut to its longest query",
    )
    p.add_argument("--seconds", type=float, default=1.0, help="per timed loop")
    p.add_argument("--repeats", type=int, default=3, help="timed loops per row (the median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls before each row")
    p.add_argument(
        "--budget-s",
        type=float,
        default=360.0,
        help="rows not started by then are skipped: the host's 8 minutes hold",
    )
    p.add_argument("--triton-image-batches", type=ints, default=ints("1,16,32,64"))
    p.add_argument("--triton-text-concurrency", type=ints, default=ints("1,8"))
    p.add_argument("--threads", type=int, default=0, help="CPU threads of torch (0: its default)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p


# -- what travels ------------------------------------------------------------------------------


def tree_bytes(root: Path) -> int:
    """What the lent host's copy takes of the working tree: tracked and unignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=False,
    )
    files = (root / name for name in listed.stdout.decode().split("\0") if name)
    return sum(f.stat().st_size for f in files if f.is_file())


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def prepare(folder: Path, *, triton: bool) -> int:
    """Fill `folder` with what the host lacks; its size in bytes."""
    import importlib.util

    from loadtests.gpu_triton import TARBALL

    ours = {*CARRIED_PACKAGES, TARBALL}
    others = (
        sorted(p.name for p in folder.iterdir() if p.name not in ours) if folder.is_dir() else []
    )
    if others:  # an earlier carry is replaced; a folder of anything else is not ours to empty
        raise SystemExit(f"{folder} holds {others[:3]}: give a new folder or an earlier carry")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name in CARRIED_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise SystemExit(f"{name} is not installed here: pip install open-clip-torch")
        shutil.copytree(
            Path(spec.origin).parent, folder / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    if triton:
        from loadtests.gpu_triton import pack

        pack(folder)
    return folder_bytes(folder)


def use_carried(folder: Path) -> None:
    if not (folder / "open_clip").is_dir():
        raise SystemExit(f"{folder} holds no open_clip: run --prepare {folder} where pip works")
    sys.path.insert(0, str(folder.resolve()))


def import_open_clip() -> Any:
    """open_clip, whose torchvision import fails beside a CPU torch here (a CUDA torchvision):
    define the two op schemas it misses, as model/onnx_export.py does; the host needs none."""
    import torch

    try:
        import torchvision  # type: ignore[import-untyped]  # noqa: F401
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        schemas: Any = torch.library.Library("torchvision", "DEF")  # type: ignore[no-untyped-call]
        schemas.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        schemas.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")
        globals()["_torchvision_schemas"] = schemas  # kept: the ops live as long as it does
    import open_clip

    return open_clip


# -- the encoders ------------------------------------------------------------------------------


def load_clip(arch: str) -> Any:
    """The architecture with random weights (seeded: the same on every host)."""
    import torch

    open_clip = import_open_clip()
    name = arch
    if arch.endswith(".json"):
        open_clip.add_model_config(Path(arch))
        name = Path(arch).stem
    torch.manual_seed(0)
    return open_clip.create_model(name, pretrained=None).eval()


def encoders(clip: Any) -> tuple[Any, Any]:
    """The image and text encoders as the export wraps them (model/encoders.py)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Image(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.clip = clip
            self.mean255: torch.Tensor
            self.std255: torch.Tensor
            self.register_buffer("mean255", torch.tensor(MEAN).view(1, 3, 1, 1) * 255.0)
            self.register_buffer("std255", torch.tensor(STD).view(1, 3, 1, 1) * 255.0)

        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            x = pixels.permute(0, 3, 1, 2).to(self.mean255.dtype)
            x = (x - self.mean255) / self.std255
            return F.normalize(self.clip.encode_image(x), dim=-1)

    class Text(nn.Module):
        """Causal and pooled at the end-of-text token: the positions after the batch's
        longest query change nothing, so the export slices them off."""

        def __init__(self) -> None:
            super().__init__()
            self.clip = clip

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            c, length = self.clip, ids.shape[1]
            x = c.token_embedding(ids) + c.positional_embedding[:length]
            x = c.ln_final(c.transformer(x, attn_mask=c.attn_mask[:length, :length]))
            pooled = x[torch.arange(x.shape[0], device=x.device), ids.argmax(dim=-1)]
            if isinstance(c.text_projection, nn.Linear):
                return F.normalize(c.text_projection(pooled), dim=-1)
            return F.normalize(pooled @ c.text_projection, dim=-1)

    return Image().eval(), Text().eval()


def token_ids(batch: int, length: int, vocab: int, seed: int = 0) -> Any:
    """Queries of random tokens between start- and end-of-text (CLIP's last two ids), each of
    2 to `length` tokens, zero-padded; the first is `length` long, so the batch needs it."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(batch, length, dtype=torch.int64)
    lengths = torch.randint(2, length + 1, (batch,), generator=g)
    lengths[0] = length
    for row, n in enumerate(lengths.tolist()):
        ids[row, 0] = vocab - 2
        ids[row, 1 : n - 1] = torch.randint(1, vocab - 2, (n - 2,), generator=g)
        ids[row, n - 1] = vocab - 1
    return ids


# -- timing ------------------------------------------------------------------------------------


def timed(
    run: Callable[[], object],
    sync: Callable[[], None],
    *,
    seconds: float,
    repeats: int,
    warmup: int,
) -> float:
    """Seconds per call: the median of `repeats` loops, each sized to take about `seconds`.

    Calls on a GPU only queue work, so the clock is read after synchronising, around whole
    loops; one synchronised call after the warm-up sizes them."""
    for _ in range(warmup):
        run()
    sync()
    start = time.perf_counter()
    run()
    sync()
    calls = max(1, math.ceil(seconds / max(time.perf_counter() - start, 1e-6)))
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        per_call.append((time.perf_counter() - start) / calls)
    return statistics.median(per_call)


@contextmanager
def precision_mode(torch: Any, precision: str) -> Iterator[None]:
    """TF32 matmuls only for `tf32`: PyTorch's fp32 default is strict IEEE."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@contextmanager
def torch_threads(torch: Any, threads: int) -> Iterator[None]:
    """Torch's intra-op threads set to `threads` (0: left as they are) and given back after:
    a caller in the same process (a test session that trains the tiny model next) must not
    inherit the count the benchmark measured with."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure_encoders(
    args: argparse.Namespace, clip: Any, log: Callable[[str], None]
) -> tuple[list[Row], list[str]]:
    """A row per encoder, precision and batch; what the time budget left out."""
    import torch

    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    deadline = time.monotonic() + args.budget_s
    size = clip.visual.image_size
    size = size[0] if isinstance(size, tuple) else int(size)
    vocab = clip.token_embedding.num_embeddings
    rows, skipped = [], []
    for precision in args.precisions.split(","):
        dtype = torch.float16 if precision == "fp16" else torch.float32
        image, text = (e.to(device=device, dtype=dtype) for e in encoders(clip))
        cases: list[tuple[str, int, Callable[[], object]]] = []
        for batch in args.image_batches:
            pixels = torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8).to(device)
            cases.append(("image", batch, partial(image, pixels)))
        for length in args.text_lengths:
            for batch in args.text_batches:
                ids = token_ids(batch, min(length, clip.context_length), vocab).to(device)
                cases.append((f"text {length}", batch, partial(text, ids)))
        for encoder, batch, run in cases:
            if time.monotonic() > deadline:
                skipped.append(f"{encoder} {precision} batch {batch}")
                continue
            with (
                torch.inference_mode(),
                precision_mode(torch, precision),
                torch_threads(torch, args.threads),
            ):
                s = timed(run, sync, seconds=args.seconds, repeats=args.repeats, warmup=args.warmup)
            rows.append(Row(encoder, precision, batch, batch / s, s * 1e3))
            log(f"  {encoder} {precision} batch {batch}: {batch / s:,.0f}/s")
        del image, text
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows, skipped


# -- output ------------------------------------------------------------------------------------


def environment(device: str, threads: int = 0) -> dict[str, str]:
    import platform

    import torch

    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    names = [line.split(":", 1)[1].strip() for line in cpu.splitlines() if "model name" in line]
    cpu_name = names[0] if names else platform.machine()
    found = {
        "device": f"{cpu_name}, {threads or torch.get_num_threads()} threads",
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        found["device"] = f"{props.name}, {props.total_memory / 2**30:.0f} GiB, "
        found["device"] += f"{props.multi_processor_count} SMs"
        found["cuda"] = str(torch.version.cuda)
        found["cudnn"] = str(torch.backends.cudnn.version())  # type: ignore[no-untyped-call]
    return found


def number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def encoder_table(rows: Sequence[Row]) -> str:
    lines = ["| encoder | precision | batch | items/s | ms/batch |", "|---|---|---:|---:|---:|"]
    lines += [
        f"| {r.encoder} | {r.precision} | {r.batch} | {number(r.items_per_s)} "
        f"| {number(r.ms_per_batch)} |"
        for r in rows
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if unknown := set(args.precisions.split(",")) - set(PRECISIONS):
        parser().error(f"--precisions: {sorted(unknown)} (known: {', '.join(PRECISIONS)})")
    root = Path(__file__).resolve().parent.parent
    if args.prepare:
        size = prepare(args.prepare, triton=not args.no_triton)
        tree = tree_bytes(root)
        print(
            f"{args.prepare}: {size / 2**20:.1f} MiB; the working tree {tree / 2**20:.1f} MiB; "
            f"together {(size + tree) / 2**20:.1f} of the host's 64 MiB"
        )
        return 0 if size + tree < CARRY_LIMIT else 1
    if args.carried:
        use_carried(args.carried)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log(f"building {args.arch} (random weights) ...")
    clip = load_clip(args.arch)
    rows, skipped = measure_encoders(args, clip, log)
    found: dict[str, Any] = {
        "environment": environment(args.device, args.threads),
        "arch": args.arch,
    }
    found["encoders"] = [asdict(r) for r in rows]
    found["skipped"] = skipped
    if not args.no_triton:
        from loadtests.gpu_triton import measure_overhead

        size = clip.visual.image_size
        found["triton"] = measure_overhead(
            args.carried,
            image_size=size[0] if isinstance(size, tuple) else int(size),
            dim=int(clip.text_projection.shape[-1]),
            image_batches=args.triton_image_batches,
            text_concurrency=args.triton_text_concurrency,
            seconds=args.seconds,
            log=log,
        )
    print("## Encoders in PyTorch (random weights; not the production ONNX/TensorRT path)\n")
    print("\n".join(f"- {k}: {v}" for k, v in found["environment"].items()))
    print(f"- model: {args.arch}\n\n{encoder_table(rows)}\n")
    if skipped:
        print(f"Skipped (past --budget-s {args.budget_s:.0f}): {', '.join(skipped)}\n")
    if "triton" in found:
        from loadtests.gpu_triton import overhead_table

        print(overhead_table(found["triton"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
