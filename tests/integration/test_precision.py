"""fp16 and int8 versions: exported beside fp32 of the same weights, measured against it, refused
below their floor (or, with --fallback, served in fp32 for the encoder below it beside the
other's int8), and served through the real Triton."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from core.embedding.arrays import row_cosines
from core.embedding.client import EmbeddingClient
from core.embedding.manifest import (
    IMAGE_MODEL,
    TEXT_MODEL,
    EncoderFallback,
    ModelManifest,
    list_versions,
    load_manifest,
)
from harness.processes import triton_ports
from model.calibration import ALTERATIONS, QUERIES, Calibration, load_calibration, photo_files
from model.cli import model_app
from model.export import export_model
from model.export_errors import ExportError
from model.precision import FLOORS, PrecisionOptions
from model.repository import version_dir
from model.triton_server import TritonServer
from tests.support.models import TINY_CONFIG

# The versions of the module's repository: one set of weights in each precision.
VERSIONS = {"fp32": 1, "int8": 2, "fp16": 3}
MIXED = 4  # int8 asked, with a floor between its two encoders' cosines, and --fallback
MODEL = {"image": IMAGE_MODEL, "text": TEXT_MODEL}


@pytest.fixture(scope="module")
def variants(repository: Path, checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Version 1 is the session's: that checkpoint's fp32 export (CPU target), made once.
    repo = tmp_path_factory.mktemp("precisions") / "models"
    shutil.copytree(repository, repo)
    assert list_versions(repo) == [VERSIONS["fp32"]]
    assert load_manifest(repo, 1).precision == "fp32"
    for precision, version in VERSIONS.items():
        if precision == "fp32":
            continue
        export_model(
            str(TINY_CONFIG),
            str(checkpoint),
            repo,
            version=version,
            precision=PrecisionOptions(precision),  # type: ignore[arg-type]
        )
    return repo


@pytest.fixture(scope="module")
def mixed(variants: Path, checkpoint: Path) -> str:
    """Version 4 through `model export --fallback`, with a floor that only the better of int8's
    two encoders reaches (those weights' own cosines decide which): what the command printed."""
    int8 = load_manifest(variants, VERSIONS["int8"]).quality
    assert int8 is not None and int8.image_cosine_mean != int8.text_cosine_mean
    floor = round((int8.image_cosine_mean + int8.text_cosine_mean) / 2, 7)
    result = CliRunner().invoke(
        model_app,
        [
            *("export", "--arch", str(TINY_CONFIG), "--pretrained", str(checkpoint)),
            *("--repository", str(variants), "--version", str(MIXED), "--precision", "int8"),
            *("--min-cosine", str(floor), "--fallback"),
        ],
    )
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def served(
    variants: Path, mixed: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    with TritonServer(variants, triton_ports(), tmp_path_factory.mktemp("triton")) as server:
        yield server


@pytest.fixture
async def client(served: TritonServer, variants: Path) -> AsyncIterator[EmbeddingClient]:
    async with EmbeddingClient(served.url, variants) as embedding_client:
        yield embedding_client


@pytest.fixture(scope="module")
def sample(variants: Path) -> Calibration:
    return load_calibration(load_manifest(variants, 1).image, *photo_files(None))


def _ops(repo: Path, name: str, version: int) -> set[str]:
    model = onnx.load(
        str(version_dir(repo, name, version) / "model.onnx"), load_external_data=False
    )
    return {node.op_type for node in model.graph.node}


def test_each_version_records_its_precision_and_quality_against_fp32(variants: Path) -> None:
    manifests = {p: load_manifest(variants, v) for p, v in VERSIONS.items()}
    assert {p: m.precision for p, m in manifests.items()} == {p: p for p in VERSIONS}
    assert manifests["fp32"].quality is None  # it is the reference
    for precision in ("int8", "fp16"):
        quality = manifests[precision].quality
        assert quality is not None
        assert quality.floor == FLOORS[precision]
        assert min(quality.image_cosine_mean, quality.text_cosine_mean) >= quality.floor
        assert quality.image_cosine_min <= quality.image_cosine_mean <= 1.0
        assert 0.0 <= quality.top10_overlap <= 1.0 and 0.0 <= quality.copies_found_first <= 1.0
        assert quality.photos >= 10 and quality.queries == len(QUERIES)
        assert quality.provider == "CPUExecutionProvider"
    # Dynamic quantization: integer matrix products, and weights a quarter of float32's size.
    assert "MatMulInteger" in _ops(variants, IMAGE_MODEL, 2)
    assert "MatMulInteger" in _ops(variants, TEXT_MODEL, 2)
    assert "MatMulInteger" not in _ops(variants, IMAGE_MODEL, 1)

    def size(name: str, version: int) -> int:
        return (version_dir(variants, name, version) / "model.onnx").stat().st_size

    # int8 shrinks the matrix products' weights (the tiny text tower is mostly its token
    # table, a lookup that stays float32); fp16 halves every weight.
    assert size(IMAGE_MODEL, 2) < size(IMAGE_MODEL, 1) * 0.6
    assert size(TEXT_MODEL, 3) < size(TEXT_MODEL, 1) * 0.55
    listing = CliRunner().invoke(model_app, ["list", "--repository", str(variants)])
    assert listing.exit_code == 0, listing.output
    rows = [line.split("\t") for line in listing.output.splitlines()]
    assert [row[5] for row in rows][:3] == ["fp32", "int8", "fp16"]
    assert rows[0][6] == "-" and rows[1][6].startswith("cos 0.9")


async def test_every_precision_serves_through_triton_close_to_fp32(
    client: EmbeddingClient, sample: Calibration
) -> None:
    queries = list(QUERIES[:16])
    images = sample.photos[:8]
    texts = {p: await client.encode_texts(queries, model_version=v) for p, v in VERSIONS.items()}
    pixels = {p: await client.encode_images(images, model_version=v) for p, v in VERSIONS.items()}
    for precision in ("int8", "fp16"):
        floor = FLOORS[precision]
        assert row_cosines(texts["fp32"], texts[precision]).mean() >= floor
        assert row_cosines(pixels["fp32"], pixels[precision]).mean() >= floor
        # float32 L2-normalized embeddings at the interface, whatever the arithmetic inside.
        assert texts[precision].dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(pixels[precision], axis=1), 1.0, atol=1e-3)
    # The versions are distinct graphs, not one file served three times.
    assert not np.array_equal(texts["fp32"], texts["int8"])


# The tiny model's random weights embed every photo alike (mean cosine between two different
# photos ~0.95), so a copy's own photo often wins by a hair that any rounding can flip; a
# trained CLIP wins by tenths. A copy counts here when fp32 finds it first by this much.
CLEAR_MARGIN = 0.002


async def test_variants_find_altered_copies_first_as_fp32_does(
    client: EmbeddingClient, sample: Calibration, variants: Path
) -> None:
    photos = len(sample.photos)
    rows = np.arange(len(sample.copy_of))
    found, margin = {}, {}
    for precision, version in VERSIONS.items():
        embeddings = await client.encode_images(sample.images, model_version=version)
        similarity = embeddings[photos:] @ embeddings[:photos].T
        found[precision] = np.argmax(similarity, axis=1) == sample.copy_of
        own = similarity[rows, sample.copy_of]
        similarity[rows, sample.copy_of] = -np.inf
        margin[precision] = own - similarity.max(axis=1)
    clear = margin["fp32"] >= CLEAR_MARGIN
    jpeg = list(ALTERATIONS).index("jpeg40")
    assert clear.sum() >= len(clear) // 2  # the test is about most copies, not a few
    assert found["fp32"][jpeg :: len(ALTERATIONS)].all()
    for precision in ("int8", "fp16"):
        # Every copy fp32 finds first clearly, the variant finds first too; and every JPEG.
        assert found[precision][clear].all()
        assert found[precision][jpeg :: len(ALTERATIONS)].all()
        quality = load_manifest(variants, VERSIONS[precision]).quality
        assert quality is not None
        assert quality.copies_found_first == pytest.approx(found[precision].mean(), abs=1e-4)
        assert quality.copies_found_first_fp32 == pytest.approx(found["fp32"].mean(), abs=1e-4)


def _snapshot(repo: Path) -> list[str]:
    return sorted(str(p.relative_to(repo)) for p in repo.rglob("*"))


def test_a_variant_below_its_floor_is_refused_and_nothing_is_written(
    variants: Path, checkpoint: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    shutil.copytree(variants, repo)
    before = _snapshot(repo)
    int8 = load_manifest(variants, VERSIONS["int8"]).quality
    assert int8 is not None
    # A floor just above what int8 of these weights reaches: it must refuse.
    floor = round(max(int8.image_cosine_mean, int8.text_cosine_mean) + 1e-6, 7)
    with pytest.raises(
        ExportError, match=r"int8 embeds too far from fp32.*below the floor.*--fallback"
    ):
        export_model(
            str(TINY_CONFIG),
            str(checkpoint),
            repo,
            precision=PrecisionOptions("int8", min_cosine=floor),
        )
    assert _snapshot(repo) == before
    assert list_versions(repo) == list_versions(variants)


def test_an_encoder_below_the_floor_serves_fp32_beside_the_others_int8(
    variants: Path, mixed: str
) -> None:
    int8 = load_manifest(variants, VERSIONS["int8"]).quality
    manifest = load_manifest(variants, MIXED)
    assert int8 is not None and manifest.quality is not None
    floor = manifest.quality.floor
    low, high = sorted(
        ("image", "text"),
        key=lambda e: int8.image_cosine_mean if e == "image" else int8.text_cosine_mean,
    )
    low_cosine = int8.image_cosine_mean if low == "image" else int8.text_cosine_mean
    assert manifest.precision == "int8"
    served = {"image": manifest.image_precision, "text": manifest.text_precision}
    assert served == {low: "fp32", high: "int8"}
    assert manifest.fallbacks == [
        EncoderFallback(encoder=low, wanted="int8", cosine=low_cosine, floor=floor)
    ]
    # The same conversion as version 2 measured the same: the cosines are recorded, and the
    # search figures are the served pair's.
    assert manifest.quality.image_cosine_mean == int8.image_cosine_mean
    assert manifest.quality.text_cosine_mean == int8.text_cosine_mean
    if low == "image":  # the served image encoder is fp32's: copies are found as fp32 finds them
        assert manifest.quality.copies_found_first == manifest.quality.copies_found_first_fp32
    # What is served is what the manifest says: integer products in one graph only, and no
    # unserved variant left beside the fp32 one.
    assert "MatMulInteger" in _ops(variants, MODEL[high], MIXED)
    assert "MatMulInteger" not in _ops(variants, MODEL[low], MIXED)
    assert [p.name for p in version_dir(variants, MODEL[low], MIXED).glob("*.onnx*")] == [
        "model.onnx"
    ]
    # Said plainly: the export's output, model list and up's version line share these words.
    reason = f"{low} encoder's int8 cosine {low_cosine:.4f} is below the floor {floor}"
    assert manifest.served_precision == f"{served['text']} text, {served['image']} image ({reason})"
    assert f"tiny-clip.json, {manifest.served_precision}, weights" in " ".join(mixed.split())
    listing = CliRunner().invoke(model_app, ["list", "--repository", str(variants)])
    assert listing.output.splitlines()[MIXED - 1].split("\t")[5] == manifest.served_precision


async def test_a_mixed_version_serves_both_encoders_through_triton(
    client: EmbeddingClient, sample: Calibration, variants: Path
) -> None:
    """Each encoder of version 4 embeds as the version of its own precision does: the fp32
    one as version 1, the int8 one as version 2 (the same weights, the same conversion)."""
    manifest = load_manifest(variants, MIXED)
    queries, images = list(QUERIES[:16]), sample.photos[:8]
    like = {"fp32": VERSIONS["fp32"], "int8": VERSIONS["int8"]}
    texts = await client.encode_texts(queries, model_version=MIXED)
    pixels = await client.encode_images(images, model_version=MIXED)
    np.testing.assert_allclose(
        texts,
        await client.encode_texts(queries, model_version=like[manifest.text_precision]),
        atol=1e-5,
    )
    np.testing.assert_allclose(
        pixels,
        await client.encode_images(images, model_version=like[manifest.image_precision]),
        atol=1e-5,
    )
    # And not as the other precision: the test tells the two apart.
    other = {"fp32": VERSIONS["int8"], "int8": VERSIONS["fp32"]}
    assert not np.allclose(
        texts,
        await client.encode_texts(queries, model_version=other[manifest.text_precision]),
        atol=1e-5,
    )


def test_what_cannot_be_exported_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="int8 is for the CPU target"):
        export_model(
            str(TINY_CONFIG), "none", tmp_path, target="gpu", precision=PrecisionOptions("int8")
        )
    with pytest.raises(ExportError, match=r"calibration folder .* does not exist"):
        export_model(
            str(TINY_CONFIG),
            "none",
            tmp_path,
            precision=PrecisionOptions("fp16", calibration_photos=tmp_path / "nowhere"),
        )
    assert list_versions(tmp_path) == []
    result = CliRunner().invoke(
        model_app,
        [
            *("export", "--arch", str(TINY_CONFIG), "--pretrained", "none"),
            *("--repository", str(tmp_path), "--precision", "int8", "--min-cosine", "1.5"),
        ],
    )
    assert result.exit_code == 2
    assert "--min-cosine must be in (0, 1]" in result.output


def test_without_a_calibration_sample_the_fallback_serves_fp32_and_says_why(
    tmp_path: Path,
) -> None:
    manifest = export_model(
        str(TINY_CONFIG),
        "none",
        tmp_path,
        precision=PrecisionOptions("int8", calibration_photos=tmp_path / "nowhere", fallback=True),
    )
    assert manifest.precision == "int8" and manifest.quality is None
    assert (manifest.image_precision, manifest.text_precision) == ("fp32", "fp32")
    why = f"calibration folder {tmp_path / 'nowhere'} does not exist"
    assert manifest.served_precision == (
        f"fp32 (image encoder's int8 not measured: {why}; text encoder's int8 not measured: {why})"
    )
    assert "MatMulInteger" not in _ops(tmp_path, IMAGE_MODEL, 1)


def test_the_manifest_of_an_fp32_export_before_precisions_reads_as_fp32(
    variants: Path, tmp_path: Path
) -> None:
    data = load_manifest(variants, 1).model_dump(mode="json")
    del data["precision"], data["quality"]
    del data["image_precision"], data["text_precision"], data["fallbacks"]
    old = ModelManifest.model_validate(data)
    assert old.precision == "fp32" and old.quality is None
    assert (old.image_precision, old.text_precision, old.fallbacks) == ("fp32", "fp32", [])
    # One written before per-encoder precisions served its precision in both encoders.
    data = load_manifest(variants, VERSIONS["int8"]).model_dump(mode="json")
    del data["image_precision"], data["text_precision"], data["fallbacks"]
    old = ModelManifest.model_validate(data)
    assert (old.image_precision, old.text_precision, old.served_precision) == (
        "int8",
        "int8",
        "int8",
    )
