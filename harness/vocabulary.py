"""Stock-photo vocabulary: unique search queries and the payloads of the bench store's photos."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from core.payload import PhotoPayload
from core.terms import TERMS_FIELD, photo_terms
from core.vectorstore import GROUP_FIELD

# Stock-photo searches: 3-7 words drawn from these, each query unique within a run.
ADJECTIVES = [
    "red", "blue", "golden", "old", "young", "happy", "smiling", "busy", "quiet", "snowy",
    "rainy", "foggy", "colorful", "vintage", "modern", "tiny", "giant", "wild", "sleepy",
    "wet", "bright", "dark", "empty", "crowded", "fresh", "wooden", "rusty", "green",
    "autumn", "summer",
]  # fmt: skip
SUBJECTS = [
    "cat", "dog", "golden retriever puppy", "bicycle", "coffee cup", "woman", "man",
    "child", "family", "business team", "laptop", "mountain lake", "city skyline", "forest",
    "beach", "sailboat", "train", "horse", "bird", "flower field", "bridge", "lighthouse",
    "street market", "vegetables", "wedding couple", "runner", "chef", "tractor",
    "hot air balloon", "waterfall", "desert road", "old car", "fox", "surfer", "skier",
    "library", "farmer", "castle", "kitchen", "concert crowd",
]  # fmt: skip
ACTIONS = [
    "running", "sleeping", "walking", "laughing", "reading", "cooking", "jumping",
    "swimming", "working", "playing", "waiting", "dancing", "flying", "resting", "eating",
]  # fmt: skip
PLACES = [
    "on the beach", "in the snow", "in a park", "against a brick wall", "in tokyo",
    "in new york", "at the office", "on a wooden desk", "by the sea", "in the mountains",
    "in a forest", "on a farm", "in the rain", "at the market", "in paris", "on a rooftop",
    "in the desert", "by a river", "in a kitchen", "at the station", "under a bridge",
    "in a field", "on the street", "at home", "in the garden", "over the ocean",
    "in a cafe", "in the city", "near a lake", "on a boat",
]  # fmt: skip
TIMES = [
    "at sunset", "at dawn", "at night", "in winter", "in autumn", "in spring", "at noon",
    "close-up", "aerial view", "black and white", "in fog", "at golden hour",
    "long exposure", "from above", "in the evening",
]  # fmt: skip
TEMPLATES = [
    "{adj} {subject} {place}",
    "{subject} {action} {place}",
    "{adj} {subject} {place} {time}",
    "{subject} {place} {time}",
    "{adj} {subject} {action} {place}",
    "{subject} {action} {time}",
]
TAGS = sorted({w for s in SUBJECTS for w in s.split()} | set(ADJECTIVES) | set(ACTIONS))
FIRST_NAMES = ["Ana", "Ben", "Chloe", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jonas"]
LAST_NAMES = ["Smith", "Garcia", "Kim", "Müller", "Rossi", "Dubois", "Tanaka", "Silva", "Novak"]
LICENSES = ["standard", "extended", "editorial"]


class Queries:
    """Unique queries: no text comes out twice in one run (the normalized form, as cached)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._seen: set[str] = set()
        self._counter = 0

    def next(self) -> str:
        r = self._rng
        for _ in range(50):
            text = r.choice(TEMPLATES).format(
                adj=r.choice(ADJECTIVES),
                subject=r.choice(SUBJECTS),
                action=r.choice(ACTIONS),
                place=r.choice(PLACES),
                time=r.choice(TIMES),
            )
            if text not in self._seen:
                break
        else:  # the combinations are running out: a counter keeps it unique
            self._counter += 1
            text = f"{text} {self._counter}"
        self._seen.add(text)
        return text

    def take(self, count: int) -> list[str]:
        return [self.next() for _ in range(count)]


def photo_key(i: int) -> str:
    """The identity of the bench store's photo i: folders of 1000, as a camera's are."""
    return f"{i // 1000:03d}/IMG_{i:07d}.jpg"


def photo_payload(r: random.Random, i: int, version: int, now: str) -> tuple[str, PhotoPayload]:
    """A photo's identity and the payload the indexer would write for it (a photo alone in
    its near-duplicate group, as most are)."""
    key = photo_key(i)
    created = datetime(2005, 1, 1, tzinfo=UTC) + timedelta(seconds=r.randrange(20 * 365 * 86400))
    subject = r.choice(SUBJECTS)
    payload: PhotoPayload = {
        "title": f"{r.choice(ADJECTIVES).capitalize()} {subject} {r.choice(PLACES)}",
        "tags": sorted({*subject.split(), *r.sample(TAGS, r.randint(2, 7))}),
        "photographer": f"{r.choice(FIRST_NAMES)} {r.choice(LAST_NAMES)}",
        "license": r.choice(LICENSES),
        "created_at": created.isoformat(),
        "extra": {},
        "photo_id": key,
        "source_uri": f"s3://photostock-originals/{key}",
        "content_version": f"{r.getrandbits(128):032x}",
        "meta_hash": f"{r.getrandbits(64):016x}",
        "model_version": version,
        "indexed_at": now,
        GROUP_FIELD: key,
        **_visual_and_derived(i),
    }
    # The words suggestions complete, as the indexer writes them (indexer/photo/writer.py).
    return key, payload | {TERMS_FIELD: photo_terms(payload)}


# The palette of core/embedding/attributes.py and the common photo sizes of a stock catalogue.
PALETTE = [
    "red", "orange", "yellow", "green", "teal", "blue", "purple", "pink", "brown", "black",
    "grey", "white",
]  # fmt: skip
SIZES = [(6000, 4000), (4000, 6000), (5472, 3648), (4000, 4000), (3000, 2000), (1920, 1080)]


def _visual_and_derived(i: int) -> PhotoPayload:
    """What the indexer derives from a photo (attributes at decode time, automatic tags, the
    popularity of the feedback events), drawn from the photo's own seed so that the fields
    above stay those of the store's earlier formats."""
    r = random.Random(i)
    width, height = r.choice(SIZES)
    ratio = width / height
    colors = r.sample(PALETTE, r.randint(1, 4))
    weights = sorted((r.random() for _ in colors), reverse=True)
    shares = {c: round(w / sum(weights), 3) for c, w in zip(colors, weights, strict=True)}
    kept = [c for c in colors if shares[c] >= 0.05]
    return {
        "width": width,
        "height": height,
        "aspect_ratio": round(ratio, 3),
        "orientation": "square" if ratio == 1 else "landscape" if ratio > 1 else "portrait",
        "colors": kept,
        "color_shares": {c: shares[c] for c in kept},
        # 0/1 as the indexer stores it: Qdrant Edge matches a boolean as the integer.
        "copy_space": int(shares[colors[0]] >= 0.6),
        "auto_tags": sorted(r.sample(TAGS, r.randint(0, 5))),
        "popularity": float(int(r.expovariate(0.2))),
    }
