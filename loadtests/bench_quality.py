"""Benchmark search quality where the project had only noise: the tiny model trained on
synthetic photos (model/train.py) against its untrained twin, on the shipped judgement sets.

    python -m loadtests.bench_quality [--work DIR] [--samples 1000] [--seed 0]

1. The held-back figures of the trained checkpoint and its twin (model/heldback.py).
2. `photosearch eval`'s measures (core/quality: nDCG@10, recall@10, MRR@10 with seeded
   bootstrap intervals, and the paired difference trained - untrained) per mode, on the
   synthetic set and the demo set. The photos are embedded by each version's exported graphs
   (onnxruntime, the graphs Triton serves) into a scratch Qdrant Edge store, and ranked by
   the same ranker the command and the quality gate use (core.quality.runner).
3. The calibration of the trained version (`photosearch model calibrate` on the synthetic
   set): the fusion and the near-duplicate threshold, old values against new.
4. int8 and fp16 of the trained weights: the export's quality figures against fp32 and their
   nDCG@10 on the synthetic set.

Prints Markdown tables; no thresholds. The tiny model only knows shapes, colours, sizes,
positions, counts and textures: on the demo photos (real photographs) both are near chance.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from core.demo import write_demo_photos
from core.embedding.arrays import Embeddings
from core.embedding.manifest import ModelManifest, list_versions, load_manifest
from core.quality.judgements import JudgementSet, load_judgements
from core.quality.metrics import Interval
from core.quality.runner import Evaluation, Mode, collection_ranker, compare, evaluate
from core.settings import Settings
from core.vectorstore import VectorStore, collection_name, open_store
from model.export import export_model
from model.precision import PrecisionOptions
from model.synthetic_judgements import write_set
from model.train import CONFIG, trained_checkpoint
from photosearch.calibrate import calibrate, embed_photos, embed_texts, write_photos

MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")
DEMO_SET = Path(__file__).parent.parent / "core" / "quality" / "sets" / "demo"
# The repository's versions: the trained fp32 and its twin, then the trained reduced.
TRAINED, UNTRAINED, INT8, FP16 = 1, 2, 3, 4


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, help="Keep the exports and photos here (default: temp).")
    p.add_argument("--samples", type=int, default=1000, help="Bootstrap samples.")
    p.add_argument("--seed", type=int, default=0)
    return p


def _ci(i: Interval) -> str:
    return f"{i.mean:.3f} [{i.low:.3f}, {i.high:.3f}]"


def export_versions(repo: Path, checkpoint: Path, synthetic_photos: Path) -> None:
    """Versions 1-4 of the trained model and its twin, each exported once into `repo`."""
    have = set(list_versions(repo)) if repo.is_dir() else set()
    wanted = {
        TRAINED: (str(checkpoint), None),
        UNTRAINED: ("none", None),
        INT8: (str(checkpoint), PrecisionOptions("int8", calibration_photos=synthetic_photos)),
        FP16: (str(checkpoint), PrecisionOptions("fp16", calibration_photos=synthetic_photos)),
    }
    for version, (weights, precision) in wanted.items():
        if version not in have:
            export_model(str(CONFIG), weights, repo, version=version, precision=precision)


class Scratch:
    """One scratch store: each (set, version)'s photos in a collection of their own."""

    def __init__(self, folder: Path, repo: Path) -> None:
        self.store: VectorStore = open_store(Settings(data_dir=folder))
        self.repo = repo
        self.settings = Settings()

    def collection(self, photos: Path, version: int, tag: str) -> str:
        manifest = load_manifest(self.repo, version)
        embedded = embed_photos(self.repo, manifest, photos, self.settings)
        name = collection_name(version, tag)
        write_photos(self.store, name, embedded)
        return name

    def embed(self, texts: Sequence[str], version: int) -> Embeddings:
        manifest: ModelManifest = load_manifest(self.repo, version)
        return embed_texts(self.repo, manifest, texts)


def evaluations(
    scratch: Scratch,
    judgements: JudgementSet,
    photos: Path,
    versions: Sequence[int],
    args: argparse.Namespace,
) -> dict[tuple[int, str], Evaluation]:
    found: dict[tuple[int, str], Evaluation] = {}
    for version in versions:
        name = scratch.collection(photos, version, judgements.name)
        for mode in MODES:
            rank = collection_ranker(scratch.store, name, embed=scratch.embed, mode=mode)
            found[version, mode] = evaluate(
                judgements,
                rank,
                collection=name,
                mode=mode,
                samples=args.samples,
                seed=args.seed,
            )
    return found


def print_comparison(name: str, found: dict[tuple[int, str], Evaluation]) -> None:
    print(f"\n### {name}: trained (v{TRAINED}) against untrained (v{UNTRAINED})\n")
    print("| mode | metric | trained | untrained | trained - untrained |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        trained, untrained = found[TRAINED, mode], found[UNTRAINED, mode]
        diff = compare(untrained, trained)
        for metric in ("ndcg", "recall", "mrr"):
            print(
                f"| {mode} | {metric}@10 | {_ci(getattr(trained, metric))} | "
                f"{_ci(getattr(untrained, metric))} | {_ci(diff[metric])} |"
            )
    hybrid = found[TRAINED, "hybrid"]
    if hybrid.by_tag:
        print(f"\nBy tag, hybrid, nDCG@10 (trained / untrained), {name}:\n")
        print("| tag | trained | untrained |")
        print("|---|---|---|")
        for tag, (ndcg, _, _) in hybrid.by_tag.items():
            other = found[UNTRAINED, "hybrid"].by_tag[tag][0]
            print(f"| {tag} | {_ci(ndcg)} | {_ci(other)} |")


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    trained = trained_checkpoint()
    print(f"## Quality: the trained tiny model ({CONFIG.name})\n")
    print(f"checkpoint {trained.checkpoint} ({'cached' if trained.cached else 'trained now'}, ")
    print(f"training took {trained.seconds:.0f} s)\n")
    print("| held back | trained | untrained |")
    print("|---|---:|---:|")
    for key, value in trained.figures.items():
        print(f"| {key} | {value:.4f} | {trained.untrained.get(key, float('nan')):.4f} |")
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as temp:
        work = args.work or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        synthetic = write_set(work / "synthetic")
        demo_dir = work / "demo"
        write_demo_photos(demo_dir)
        repo = work / "models"
        export_versions(repo, trained.checkpoint, synthetic.photos)
        scratch = Scratch(work / "store", repo)
        try:
            run_all(scratch, synthetic.photos, synthetic.judgements, demo_dir, repo, args)
        finally:
            scratch.store.close()


def run_all(
    scratch: Scratch,
    synthetic_photos: Path,
    synthetic_judgements: Path,
    demo_dir: Path,
    repo: Path,
    args: argparse.Namespace,
) -> None:
    synthetic = load_judgements(synthetic_judgements)
    found = evaluations(
        scratch, synthetic, synthetic_photos, (TRAINED, UNTRAINED, INT8, FP16), args
    )
    print_comparison(f"synthetic set ({len(synthetic.queries)} queries)", found)
    demo = load_judgements(DEMO_SET)
    print_comparison(
        f"demo set ({len(demo.queries)} queries)",
        evaluations(scratch, demo, demo_dir, (TRAINED, UNTRAINED), args),
    )
    report = calibrate(repo, TRAINED, synthetic_photos, synthetic, settings=Settings())
    c = report.calibration
    print("\n### Calibration of the trained version on the synthetic set\n")
    print("| value | before (set on ViT-B-32, random weights) | calibrated |")
    print("|---|---:|---:|")
    print(f"| RRF k | 60 | {c.rrf_k} |")
    print(f"| keyword weight | 1 | {c.keyword_weight} |")
    print(f"| near-duplicate threshold | 0.99 | {c.duplicate_threshold} |")
    for key, value in c.figures.items():
        print(f"| {key} | | {value} |")
    print("\nFusions, best first (k, keyword weight: mean nDCG@10):")
    print(", ".join(f"({f.rrf_k}, {f.keyword_weight}): {f.ndcg:.4f}" for f in report.fusions[:8]))
    print("\n### Reduced precisions of the trained weights (synthetic set)\n")
    print(
        "| precision | image cos mean / min | text cos mean / min | top-10 overlap | "
        "copies found first | hybrid nDCG@10 | vector nDCG@10 |"
    )
    print("|---|---|---|---:|---:|---|---|")
    for version, label in ((TRAINED, "fp32"), (INT8, "int8"), (FP16, "fp16")):
        m = load_manifest(repo, version)
        q = m.quality
        quality = (
            f"{q.image_cosine_mean:.4f} / {q.image_cosine_min:.4f} | "
            f"{q.text_cosine_mean:.4f} / {q.text_cosine_min:.4f} | {q.top10_overlap:.3f} | "
            f"{q.copies_found_first:.3f}"
            if q is not None
            else "- | - | - | -"
        )
        print(
            f"| {label} ({m.served_precision}) | {quality} | "
            f"{_ci(found[version, 'hybrid'].ndcg)} | {_ci(found[version, 'vector'].ndcg)} |"
        )


if __name__ == "__main__":
    main()
