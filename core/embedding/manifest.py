"""The manifest of one exported model version: what the exporter wrote, what the clients read."""

from __future__ import annotations

import hashlib
import json
from enum import IntEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from core.atomicfile import write_atomic
from core.tagging.rule import TagRule

IMAGE_MODEL = "clip_image"
TEXT_MODEL = "clip_text"
IMAGE_INPUT, IMAGE_OUTPUT = "image", "image_embeds"
TEXT_INPUT, TEXT_OUTPUT = "input_ids", "text_embeds"
TOKENIZER_FILE = "tokenizer.json"
# Largest batch either model takes in one request (config.pbtxt max_batch_size).
MAX_BATCH_SIZE = 64
# Plain files at the repository root: Triton treats every folder there as a model.
MANIFEST_GLOB = "manifest-*.json"


class ImagePreprocessing(BaseModel):
    """open_clip's eval transform, in numbers the client reproduces with Pillow."""

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    resize_mode: Literal["shortest", "squash"] = "shortest"


class TokenizerSpec(BaseModel):
    """What the serving tokenizer needs beyond its tokenizer.json.

    The defaults are CLIP's BPE with a dynamic length: manifests written before the other
    fields existed read as what they were.
    """

    kind: Literal["clip_bpe", "huggingface"] = Field(
        "clip_bpe", description="open_clip's SimpleTokenizer, or its HFTokenizer."
    )
    file: str = TOKENIZER_FILE
    context_length: int
    sot_id: int | None = Field(None, description="CLIP BPE's start-of-text id.")
    eot_id: int | None = Field(None, description="CLIP BPE's end-of-text id.")
    clean: Literal["lower", "whitespace", "canonicalize"] = "lower"
    padding: Literal["dynamic", "fixed"] = Field(
        "dynamic",
        description="dynamic: the text encoder takes any length up to the context (a causal "
        "tower); fixed: exactly context_length ids, padded with pad_id.",
    )
    pad_id: int = 0
    padding_side: Literal["right", "left"] = "right"
    truncation_side: Literal["right", "left"] = "right"
    strip_sep_id: int | None = Field(
        None, description="This id becomes 0 after padding (open_clip's strip_sep_token)."
    )
    split_special_tokens: bool = Field(
        False, description="Special tokens written in the text are split like other text."
    )


Precision = Literal["fp32", "fp16", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "fp16", "int8")
Encoder = Literal["image", "text"]


class VariantQuality(BaseModel):
    """How far a reduced-precision version embeds from fp32 of the same weights, measured at
    export on a calibration sample (photos with altered copies, and queries)."""

    image_cosine_mean: float
    image_cosine_min: float
    text_cosine_mean: float
    text_cosine_min: float
    top10_overlap: float = Field(
        description="Mean share of each query's 10 nearest photos that fp32 and the served "
        "encoders have in common (an encoder that fell back to fp32 counts as fp32)."
    )
    copies_found_first: float = Field(
        description="Share of altered copies (crop, JPEG q40, flip) whose nearest photo is "
        "their original, with the served image encoder."
    )
    copies_found_first_fp32: float = Field(
        default=0.0, description="The same share in fp32: what the variant is held to."
    )
    floor: float = Field(description="The lowest mean cosine the export accepted.")
    photos: int
    queries: int
    provider: str = Field(description="The onnxruntime execution provider that measured it.")


class EncoderFallback(BaseModel):
    """An encoder served in fp32 although the export asked for a smaller precision, and why."""

    encoder: Encoder
    wanted: Precision
    cosine: float | None = Field(
        default=None, description="Its variant's mean cosine to fp32; none when not measured."
    )
    floor: float | None = None
    detail: str = Field(default="", description="Why, when no cosine was measured.")

    @property
    def reason(self) -> str:
        if self.cosine is None or self.floor is None:
            return f"{self.encoder} encoder's {self.wanted} not measured: {self.detail}"
        return (
            f"{self.encoder} encoder's {self.wanted} cosine {self.cosine:.4f} is below "
            f"the floor {self.floor}"
        )


class TagCalibration(BaseModel):
    """What `photosearch model calibrate-tags` measured for one model version on labelled
    photos: the tag rule's threshold and margin, and whether its tags beat chance at all.
    enabled False: the indexer stores no automatic tags for this version, and says why."""

    threshold: float = Field(description="Lowest cosine of a photo to a tag it earns.")
    margin: float = Field(
        description="Least amount a tag's cosine exceeds the photo's mean cosine over the "
        "whole vocabulary."
    )
    max_tags: int = Field(10, ge=1, description="Most tags one photo keeps, best first.")
    enabled: bool = Field(description="False: tags no better than chance; none are stored.")
    reason: str = Field("", description="Why the tags are off (or the figures that enable them).")
    figures: dict[str, float] = Field(
        default_factory=dict,
        description="Precision, recall and F1 of the rule against the labels, and chance's.",
    )
    vocabulary: str = Field(
        "", description="The vocabulary and labelled photos it was measured on, with digest."
    )
    vocabulary_digest: str = Field(
        "", description="core.tagging Vocabulary.digest of the vocabulary it was measured on."
    )
    calibrated_at: str = ""

    def rule(self) -> TagRule:
        return TagRule(self.threshold, self.margin)


class SearchCalibration(BaseModel):
    """What `photosearch model calibrate` measured for one model version on a judgement set
    with photos: the hybrid fusion and the near-duplicate threshold that suit its embeddings.
    A version without one searches and groups with the defaults (RRF k 60, equal weights,
    PHOTOSEARCH_INDEXER__DUPLICATE_THRESHOLD)."""

    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion's k.")
    keyword_weight: float = Field(
        1.0, gt=0, description="The keyword ranking's weight against the vector ranking's 1."
    )
    duplicate_threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Cosine at or above which a photo joins its nearest neighbour's "
        "near-duplicate group; none: the indexer's setting.",
    )
    judgements: str = Field("", description="The judgement set and photos it was measured on.")
    figures: dict[str, float] = Field(
        default_factory=dict, description="nDCG@10 and the threshold's figures behind it."
    )
    calibrated_at: str = ""
    tagging: TagCalibration | None = Field(
        default=None,
        description="The automatic tags' rule for this version; none: not calibrated, no "
        "tags stored (run photosearch model calibrate-tags).",
    )


class ModelManifest(BaseModel):
    """One model version: both encoders, the tokenizer and where they came from."""

    version: int = Field(ge=1)
    arch: str
    arch_config: dict[str, object]
    weights: str = Field(description="'random', an open_clip pretrained tag, or a checkpoint path.")
    weights_sha256: str | None = None
    embedding_dim: int
    image: ImagePreprocessing
    tokenizer: TokenizerSpec
    target: Literal["cpu", "gpu"]
    # Manifests written before precisions existed are fp32.
    precision: Precision = Field(
        default="fp32",
        description="The precision the export was asked for; each encoder's served one is "
        "below (fp32 where the variant fell short of the floor).",
    )
    # Manifests written before per-encoder precisions serve `precision` in both (_as_asked).
    image_precision: Precision = "fp32"
    text_precision: Precision = "fp32"
    fallbacks: list[EncoderFallback] = Field(
        default_factory=list, description="The encoders served in fp32 instead, and why."
    )
    quality: VariantQuality | None = Field(
        default=None, description="Against fp32 of the same weights; none for fp32 itself."
    )
    calibration: SearchCalibration | None = Field(
        default=None, description="The search's calibration for these embeddings, if run."
    )
    files: dict[str, str] = Field(description="Path in the repository -> sha256.")
    exported_at: str
    exporter: dict[str, str] = Field(description="Versions of the tools that exported it.")

    @model_validator(mode="before")
    @classmethod
    def _as_asked(cls, data: Any) -> Any:
        if isinstance(data, dict):
            asked = data.get("precision", "fp32")
            return {"image_precision": asked, "text_precision": asked} | data
        return data

    @property
    def random_weights(self) -> bool:
        return self.weights == "random"

    @property
    def served_precision(self) -> str:
        """What serves, for people: "int8", or "int8 text, fp32 image (why)"."""
        image, text = self.image_precision, self.text_precision
        served = image if image == text else f"{text} text, {image} image"
        if self.fallbacks:
            served += f" ({'; '.join(f.reason for f in self.fallbacks)})"
        return served


def manifest_path(repository: Path, version: int) -> Path:
    """Where version N's manifest lives in a model repository."""
    return repository / f"manifest-{version}.json"


def tokenizer_path(repository: Path, version: int) -> Path:
    """The exported BPE vocabulary of version N, beside its text encoder."""
    return repository / TEXT_MODEL / str(version) / TOKENIZER_FILE


def load_manifest(repository: Path, version: int) -> ModelManifest:
    """Read version N's manifest; FileNotFoundError names the missing version."""
    path = manifest_path(repository, version)
    if not path.is_file():
        raise FileNotFoundError(f"model version {version} has no manifest at {path}")
    return ModelManifest.model_validate_json(path.read_text())


def list_versions(repository: Path) -> list[int]:
    """The exported model versions in a repository, oldest first."""
    numbers = (p.stem.removeprefix("manifest-") for p in repository.glob(MANIFEST_GLOB))
    return sorted(int(n) for n in numbers if n.isdigit())


def write_manifest(repository: Path, manifest: ModelManifest) -> Path:
    """Write version N's manifest atomically (it is what marks the version complete)."""
    path = manifest_path(repository, manifest.version)
    write_atomic(path, json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    return path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Priority(IntEnum):
    """Triton's priority levels on both models (model/triton_config.py): 1 is served first."""

    SEARCH = 1  # the query API: someone is waiting for the answer
    INDEXING = 2  # the indexer, and callers that say nothing: they wait behind searches
