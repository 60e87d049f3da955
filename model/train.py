"""Train the tiny open_clip model on synthetic captioned photos, once, into a cache outside git.

The checkpoint is keyed by the content of what decides its weights (this script, the generator
and the architecture's config): a second call finds it and returns at once; a change to any of
them trains a new one. torch and open_clip are imported inside the functions.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.atomicfile import write_atomic
from model import inputs, synthetic
from model.inputs import model_pixels, tokenize
from model.synthetic import ATTRIBUTES, COLOURS, SHAPES, Content, caption

CONFIG = Path(__file__).parent / "configs" / "tiny-trained.json"
# Training photos come from their own seed: the default synthetic set (seed 0) and every
# held-back set (model/heldback.py) are never seen in training.
TRAIN_SEED = 1_000_003


@dataclass(frozen=True)
class Recipe:
    """What decides the weights besides the code (part of the cache key). The seed is the one
    the export draws random weights with: training starts from the untrained twin."""

    steps: int = 1000
    batch: int = 64
    photos: int = 4000
    learning_rate: float = 2e-3
    weight_decay: float = 0.05
    seed: int = 0
    # Torch's intra-op threads while training. How many threads share a reduction changes its
    # float rounding, and over 1,000 steps the weights: one thread gave precision@10 0.167,
    # two 0.181. Fixed here, the weights do not follow the machine's cores or a caller that
    # changed torch's count (a benchmark run in the same test process did).
    threads: int = 2


RECIPE = Recipe()


@dataclass(frozen=True)
class Trained:
    """A cached checkpoint, its and its untrained twin's held-back figures (model/heldback.py),
    and the seconds its training took (information only: it depends on the machine)."""

    checkpoint: Path
    figures: dict[str, float]
    untrained: dict[str, float]
    seconds: float
    cached: bool


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """${PHOTOSEARCH_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/photosearch}."""
    if environ.get("PHOTOSEARCH_CACHE_DIR"):
        return Path(environ["PHOTOSEARCH_CACHE_DIR"])
    xdg = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "photosearch"


def cache_key(config: Path = CONFIG) -> str:
    """A digest of the training script, its inputs, the generator and the config: the weights'
    recipe."""
    digest = hashlib.sha256()
    for path in (Path(__file__), Path(inputs.__file__), Path(synthetic.__file__), config):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def _codes(contents: Sequence[Content]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Each content's attributes as integers (position -1 when several shapes are spread)."""
    tables: dict[str, Sequence[object]] = {
        "shape": SHAPES,
        "colour": tuple(COLOURS),
        "size": synthetic.SIZES,
        "position": synthetic.POSITIONS,
        "count": synthetic.COUNTS,
        "texture": synthetic.TEXTURES,
    }
    rows = [
        [-1 if getattr(c, a) is None else tables[a].index(getattr(c, a)) for a in ATTRIBUTES]
        for c in contents
    ]
    return np.array(rows, dtype=np.int64)


def _described(rng: np.random.Generator) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Which attributes a training caption names: often all, else a random part (the shape
    in most), so that short queries like 'a red circle' have captions of their kind."""
    if rng.random() < 0.3:
        return np.ones(len(ATTRIBUTES), dtype=bool)
    mask = rng.random(len(ATTRIBUTES)) < 0.4
    mask[ATTRIBUTES.index("shape")] = rng.random() < 0.85
    mask[ATTRIBUTES.index("count")] = True  # 'a', 'two', 'three' always say it
    return mask


def _targets(
    codes: np.ndarray[Any, np.dtype[np.int64]], masks: np.ndarray[Any, np.dtype[np.bool_]]
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """match[i, j]: photo j shows everything caption i names. Another photo of the batch that
    fits a caption is a positive too, not a negative to push away."""
    same: np.ndarray[Any, np.dtype[np.bool_]] = codes[:, None, :] == codes[None, :, :]
    fits: np.ndarray[Any, np.dtype[np.bool_]] = np.all(same | ~masks[:, None, :], axis=-1)
    return fits.astype(np.float32)


def train(
    config: Path = CONFIG,
    recipe: Recipe = RECIPE,
    progress: Callable[[int, float, Any], None] | None = None,
) -> tuple[dict[str, Any], float]:
    """Contrastive training from seeded random weights; the state dict and the seconds taken.
    `progress(step, loss, model)` is called every 100 steps and after the last. Torch runs on
    the recipe's threads meanwhile, and on the caller's count again after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        return _train(config, recipe, progress)
    finally:
        torch.set_num_threads(threads)


def _train(
    config: Path, recipe: Recipe, progress: Callable[[int, float, Any], None] | None
) -> tuple[dict[str, Any], float]:
    import time

    import torch
    import torch.nn.functional as F
    from PIL import Image

    from model.encoders import ImageEncoder, TextEncoder
    from model.onnx_export import import_open_clip

    started = time.perf_counter()
    open_clip = import_open_clip()
    open_clip.add_model_config(config)
    torch.manual_seed(recipe.seed)
    clip, _, _ = open_clip.create_model_and_transforms(config.stem, pretrained=None)
    tokenizer = open_clip.get_tokenizer(config.stem)
    cfg = clip.visual.preprocess_cfg
    size = int(
        clip.visual.image_size[0]
        if isinstance(clip.visual.image_size, tuple)
        else clip.visual.image_size
    )
    # The same graph the export serves: uint8 pixels in, CLIP's normalization inside.
    image_encoder = ImageEncoder(clip, tuple(cfg["mean"]), tuple(cfg["std"]))
    text_encoder = TextEncoder(clip)

    photos = synthetic.generate(recipe.photos, TRAIN_SEED)
    pixels = torch.from_numpy(np.stack([model_pixels(p, size, Image) for p in photos]))
    codes = _codes([p.content for p in photos])
    rng = np.random.default_rng(recipe.seed)
    tokens: dict[str, Any] = {}

    optimizer = torch.optim.AdamW(
        clip.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay
    )
    warmup = max(1, recipe.steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: (
            min(1.0, (step + 1) / warmup)
            * 0.5
            * (1 + np.cos(np.pi * min(1.0, step / recipe.steps)))
        ),
    )
    clip.train()
    for step in range(1, recipe.steps + 1):
        chosen = rng.choice(len(photos), size=recipe.batch, replace=False)
        masks = np.stack([_described(rng) for _ in chosen])
        texts = [
            caption(photos[i].content, [a for a, m in zip(ATTRIBUTES, mask, strict=True) if m])
            for i, mask in zip(chosen, masks, strict=True)
        ]
        ids = tokenize(tokenizer, texts, tokens)
        match = torch.from_numpy(_targets(codes[chosen], masks))
        images = image_encoder(pixels[torch.from_numpy(chosen)])
        captions = text_encoder(ids)
        logits = clip.logit_scale.exp().clamp(max=100) * captions @ images.T
        # Soft targets: every fitting photo (row) and every fitting caption (column) shares it.
        loss = (
            F.cross_entropy(logits, match / match.sum(1, keepdim=True))
            + F.cross_entropy(logits.T, (match / match.sum(0, keepdim=True)).T)
        ) / 2
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        schedule.step()
        if progress is not None and (step % 100 == 0 or step == recipe.steps):
            clip.eval()
            progress(step, loss.item(), clip)
            clip.train()
    clip.eval()
    return clip.state_dict(), time.perf_counter() - started


def checkpoint_paths(config: Path, recipe: Recipe, root: Path) -> tuple[Path, Path]:
    """ROOT/trained/<key>.pt and its record <key>.json, keyed by cache_key and the recipe."""
    recipe_text = json.dumps(asdict(recipe), sort_keys=True)
    key = hashlib.sha256((cache_key(config) + recipe_text).encode()).hexdigest()[:20]
    return root / "trained" / f"{key}.pt", root / "trained" / f"{key}.json"


def trained_checkpoint(
    config: Path = CONFIG,
    recipe: Recipe = RECIPE,
    root: Path | None = None,
    progress: Callable[[int, float, Any], None] | None = None,
) -> Trained:
    """The cached checkpoint of `config` trained by `recipe`, training it first if absent
    (`progress`: see train)."""
    checkpoint, record = checkpoint_paths(config, recipe, root or cache_root())
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    # One trainer per key: test sessions that start together wait for the first one's file
    # instead of each spending minutes of the same CPUs on the same weights.
    with open(checkpoint.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if checkpoint.is_file() and record.is_file():
            saved = json.loads(record.read_text())
            return Trained(
                checkpoint, saved["trained"], saved["untrained"], saved["seconds"], cached=True
            )
        return _train_into(checkpoint, record, config, recipe, progress)


def _train_into(
    checkpoint: Path,
    record: Path,
    config: Path,
    recipe: Recipe,
    progress: Callable[[int, float, Any], None] | None,
) -> Trained:
    import torch

    from model.heldback import held_back_figures

    state, seconds = train(config, recipe, progress)
    figures, untrained = held_back_figures(config, state), held_back_figures(config, None)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    # The checkpoint before its record: a record is only ever beside a whole checkpoint.
    write_atomic(checkpoint, buffer.getvalue())
    saved = {"trained": figures, "untrained": untrained, "seconds": seconds}
    write_atomic(record, json.dumps(saved, indent=2))
    return Trained(checkpoint, figures, untrained, seconds, cached=False)
