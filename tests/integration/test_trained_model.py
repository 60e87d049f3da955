"""The tiny model trained on synthetic photos finds held-back photos of a described shape and
colour far above chance, with PyTorch and through its export served by Triton; its untrained
twin does not. Figures against chance, never timings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.embedding.client import EmbeddingClient
from core.embedding.manifest import load_manifest
from harness.processes import triton_ports
from model.heldback import (
    held_back_figures,
    held_back_photos,
    retrieval_figures,
    shape_colour_queries,
)
from model.synthetic import image_of, png_bytes
from model.train import CONFIG
from model.triton_server import TritonServer
from tests.support.trained import TRAINED, TRAINED_AGAIN, UNTRAINED

# The bar: at least five times chance on held-back pairs.
LIFT = 5.0
# Random weights rank by chance, give or take what one draw happens to favour.
NEAR_CHANCE = 2.0


def test_the_trained_checkpoint_beats_chance_and_its_twin_does_not(
    trained_checkpoint: Path,
) -> None:
    state = torch.load(trained_checkpoint, weights_only=True)
    trained = held_back_figures(CONFIG, state)
    untrained = held_back_figures(CONFIG, None)
    assert trained["queries"] == 48
    assert trained["precision_lift"] >= LIFT, trained
    assert trained["recall_lift"] >= LIFT, trained
    assert untrained["precision_lift"] < NEAR_CHANCE, untrained
    assert untrained["recall_lift"] < NEAR_CHANCE, untrained


@pytest.fixture(scope="module")
def trained_triton(
    trained_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    with TritonServer(
        trained_repository, triton_ports(), tmp_path_factory.mktemp("triton")
    ) as server:
        yield server


@pytest.fixture
async def trained_client(
    trained_triton: TritonServer, trained_repository: Path
) -> AsyncIterator[EmbeddingClient]:
    async with EmbeddingClient(trained_triton.url, trained_repository) as client:
        yield client


async def _figures(client: EmbeddingClient, version: int) -> dict[str, float]:
    photos = held_back_photos()
    files = [png_bytes(image_of(p)) for p in photos]
    images: list[Any] = []
    for start in range(0, len(files), 64):
        chunk = files[start : start + 64]
        images.append(await client.encode_image_bytes(chunk, model_version=version))
    texts = [text for text, _, _ in shape_colour_queries()]
    queries = await client.encode_texts(texts, model_version=version)
    return retrieval_figures(np.concatenate(images), [p.content for p in photos], queries)


async def test_the_served_export_finds_described_photos_and_its_twin_does_not(
    trained_client: EmbeddingClient, trained_repository: Path
) -> None:
    manifests = {v: load_manifest(trained_repository, v) for v in (TRAINED, UNTRAINED)}
    assert manifests[UNTRAINED].random_weights and not manifests[TRAINED].random_weights
    assert manifests[UNTRAINED].arch_config == manifests[TRAINED].arch_config
    trained = await _figures(trained_client, TRAINED)
    again = await _figures(trained_client, TRAINED_AGAIN)
    untrained = await _figures(trained_client, UNTRAINED)
    assert trained["precision_lift"] >= LIFT, trained
    assert trained["recall_lift"] >= LIFT, trained
    assert again == pytest.approx(trained)
    assert untrained["precision_lift"] < NEAR_CHANCE, untrained
    assert untrained["recall_lift"] < NEAR_CHANCE, untrained
