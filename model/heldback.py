"""How well a model finds held-back synthetic photos by described shape and colour, vs chance.

Every query 'a red circle' of the 48 shape-colour pairs ranks the held-back photos; a photo is
relevant when its content shows that shape in that colour. Chance is what a random ranking
scores: precision@10 equals the share of relevant photos, recall@10 equals 10 / photos.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model import synthetic
from model.inputs import model_pixels, tokenize
from model.synthetic import COLOURS, SHAPES, Content

TOP = 10
# The held-back set: a seed of its own, never seen in training (model/train.py's TRAIN_SEED).
HELD_BACK_SEED = 7
HELD_BACK_COUNT = 600


def shape_colour_queries() -> list[tuple[str, str, str]]:
    """(text, shape, colour) for every pair: 'a red circle', 'an orange star', ..."""
    return [(f"{'an' if c == 'orange' else 'a'} {c} {s}", s, c) for s in SHAPES for c in COLOURS]


def retrieval_figures(
    images: np.ndarray[Any, Any], contents: Sequence[Content], texts: np.ndarray[Any, Any]
) -> dict[str, float]:
    """Mean precision@10 and recall@10 of the shape-colour queries (rows of `texts`, in
    shape_colour_queries' order) over `images`, their chance values and the ratios to chance.
    Embeddings are L2-normalized rows."""
    queries = shape_colour_queries()
    scores = texts @ images.T
    precision, recall, base = [], [], []
    for row, (_, shape, colour) in zip(scores, queries, strict=True):
        relevant = np.array([c.shape == shape and c.colour == colour for c in contents])
        if not relevant.any():
            continue  # a pair the set does not hold has no figure to give
        top = np.argsort(-row, kind="stable")[:TOP]
        hits = int(relevant[top].sum())
        precision.append(hits / TOP)
        recall.append(hits / int(relevant.sum()))
        base.append(float(relevant.mean()))
    chance_precision = float(np.mean(base))
    chance_recall = TOP / len(contents)
    p, r = float(np.mean(precision)), float(np.mean(recall))
    return {
        "queries": float(len(precision)),
        "photos": float(len(contents)),
        "precision_at_10": p,
        "recall_at_10": r,
        "chance_precision_at_10": chance_precision,
        "chance_recall_at_10": chance_recall,
        "precision_lift": p / chance_precision,
        "recall_lift": r / chance_recall,
    }


def held_back_photos(
    count: int | None = None, seed: int | None = None
) -> list[synthetic.SyntheticPhoto]:
    return synthetic.generate(count or HELD_BACK_COUNT, HELD_BACK_SEED if seed is None else seed)


def torch_embeddings(
    config: Path, state: dict[str, Any] | None, photos: Sequence[synthetic.SyntheticPhoto]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Image embeddings of `photos` and text embeddings of the shape-colour queries, by the
    PyTorch model of `config` with `state` (None: the export's seeded random weights)."""
    import torch

    from model.onnx_export import import_open_clip

    open_clip = import_open_clip()
    open_clip.add_model_config(config)
    torch.manual_seed(0)  # as model.export.load_clip draws random weights
    clip, _, _ = open_clip.create_model_and_transforms(config.stem, pretrained=None)
    if state is not None:
        clip.load_state_dict(state)
    return model_embeddings(clip.eval(), photos, open_clip.get_tokenizer(config.stem))


def model_embeddings(
    clip: Any, photos: Sequence[synthetic.SyntheticPhoto], tokenizer: Any
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """torch_embeddings of an open_clip model in eval mode."""
    import torch
    from PIL import Image

    from model.encoders import ImageEncoder, TextEncoder

    cfg = clip.visual.preprocess_cfg
    size = int(cfg["size"][0] if isinstance(cfg["size"], (tuple, list)) else cfg["size"])
    pixels = torch.from_numpy(np.stack([model_pixels(p, size, Image) for p in photos]))
    texts = [text for text, _, _ in shape_colour_queries()]
    with torch.no_grad():
        images = ImageEncoder(clip, tuple(cfg["mean"]), tuple(cfg["std"]))(pixels)
        queries = TextEncoder(clip)(tokenize(tokenizer, texts, {}))
    return images.numpy(), queries.numpy()


def held_back_figures(config: Path, state: dict[str, Any] | None) -> dict[str, float]:
    """retrieval_figures of the PyTorch model on the held-back photos."""
    photos = held_back_photos()
    images, texts = torch_embeddings(config, state, photos)
    return retrieval_figures(images, [p.content for p in photos], texts)
