"""The trainer's cache (where, keyed by what, found again) and its targets; the trained model's
figures are tests/integration/test_trained_model.py's."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from model.synthetic import Content
from model.train import (
    CONFIG,
    RECIPE,
    _codes,
    _targets,
    cache_key,
    cache_root,
    checkpoint_paths,
    train,
    trained_checkpoint,
)


def test_the_cache_is_where_the_variables_say() -> None:
    assert cache_root({"PHOTOSEARCH_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}) == Path("/c")
    assert cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/photosearch")
    assert cache_root({}) == Path.home() / ".cache" / "photosearch"


def test_the_key_follows_the_config_content(tmp_path: Path) -> None:
    copy = tmp_path / CONFIG.name
    shutil.copyfile(CONFIG, copy)
    assert cache_key(copy) == cache_key(CONFIG)
    config = json.loads(CONFIG.read_text())
    config["embed_dim"] = 32
    copy.write_text(json.dumps(config))
    assert cache_key(copy) != cache_key(CONFIG)


def test_a_cached_checkpoint_is_returned_without_training(tmp_path: Path) -> None:
    checkpoint, record = checkpoint_paths(CONFIG, RECIPE, tmp_path)
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    figures = {"precision_at_10": 0.5}
    record.write_text(json.dumps({"trained": figures, "untrained": {}, "seconds": 9.0}))
    found = trained_checkpoint(root=tmp_path)
    assert (found.checkpoint, found.figures, found.cached) == (checkpoint, figures, True)
    assert checkpoint.parent == tmp_path / "trained"


def test_the_recipe_is_part_of_the_key(tmp_path: Path) -> None:
    checkpoint, record = checkpoint_paths(CONFIG, RECIPE, tmp_path)
    assert checkpoint.suffix == ".pt" and record == checkpoint.with_suffix(".json")
    assert checkpoint.name != checkpoint_paths(CONFIG, replace(RECIPE, steps=1), tmp_path)[0].name


def test_training_runs_on_the_recipe_s_threads_and_gives_the_caller_its_own_back() -> None:
    """The weights follow the threads that share each reduction; the recipe fixes them, so a
    caller that changed torch's count (a benchmark earlier in a test process) trains the
    same weights as a fresh process."""
    seen: list[int] = []
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        recipe = replace(RECIPE, steps=2, batch=8, photos=16, threads=2)
        train(CONFIG, recipe, lambda step, loss, model: seen.append(torch.get_num_threads()))
        assert seen == [2]
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_every_photo_a_caption_fits_is_its_match() -> None:
    contents = [
        Content("circle", "red", "small", "left", 1, "plain"),
        Content("circle", "blue", "large", "top", 1, "dotted"),
        Content("star", "red", "small", None, 2, "plain"),
    ]
    codes = _codes(contents)
    everything = np.ones((3, 6), dtype=bool)
    # Caption 0 says only "a circle" (shape and count): photos 0 and 1 fit it.
    shape_only = everything.copy()
    shape_only[0] = [True, False, False, False, True, False]
    assert _targets(codes, everything).tolist() == np.eye(3).tolist()
    assert _targets(codes, shape_only)[0].tolist() == [1.0, 1.0, 0.0]
