"""A deterministic corpus of >= 1,000 varied search queries for tokenizer parity."""
# ruff: noqa: RUF001  (look-alike characters from other scripts are the point of this corpus)

from __future__ import annotations

import random

BASE = [
    "a red bicycle against a brick wall",
    "cat sleeping on a windowsill",
    "Sunset over the ocean",
    "mountain lake reflection at dawn",
    "business people shaking hands",
    "close-up of coffee beans",
    "New York City skyline at night",
    "golden retriever puppy in the snow",
    "aerial view of a forest",
    "woman running on the beach",
    "vintage car on route 66",
    "fresh vegetables at a farmers market",
    "child blowing bubbles",
    "rainy street in Tokyo",
    "astronaut floating in space",
    "old man reading",
    "wedding rings on a bible",
    "laptop on a wooden desk",
    "hot air balloons over Cappadocia",
    "macro shot of a bee on a flower",
    "northern lights over Iceland",
    "empty office at 3 a.m.",
    "don't walk sign",
    "it's raining cats & dogs",
    "we're open 24/7",
    "they've got 99 problems",
    "I'm lovin' it",
    "you'll never walk alone",
    "he'd rather be fishing",
    "rock'n'roll concert crowd",
]
ADDITIONS = [
    "Café crème brûlée",
    "naïve façade",
    "Smörgåsbord in Göteborg",
    "jalapeño piñata",
    "Ærø island",
    "東京の夜景",
    "北京 故宫",
    "서울 야경",
    "Москва зимой",
    "Αθήνα Ακρόπολη",
    "مدينة القدس",
    "तारे ज़मीन पर",
    "ภูเก็ต ชายหาด",
    "שלום עולם",
    "Việt Nam phở",
    "İstanbul boğazı",
    "ß ẞ ǅ ﬁ ﬀ",
    "½ ¾ ² ³ ⅷ",
    "٣ ٤ ٥",
    "😀",
    "🎉🎉🎉 party",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈 flag",
    "❤️ love",
    "🇫🇷 Paris",
    "🐶🐱",
    "✨ sparkle ✨",
    "&amp; &lt;b&gt; &quot;quoted&quot;",
    "Tom &amp;amp; Jerry",
    "&#39;single&#39;",
    "caf&eacute;",
    "&nbsp;x",
    "A&B",
    "<b>bold</b>",
    "</w>",
    "<start_of_text>",
    "<end_of_text> trailing",
    "x<end_of_text>y",
    "Ã©tÃ© mojibake",
    "â€œsmart quotesâ€\x9d",
    "\u200bzero\u200bwidth",
    "soft\u00adhyphen",
    "\ufeffbom",
    "tab\tseparated",
    "line\nbreak",
    "  leading and trailing  ",
    "many     spaces",
    "\u3000ideographic",
    "C++ & C# developers",
    "$100 bill",
    "50% off!!!",
    "e-mail@example.com",
    "https://example.com/a?b=c",
    "#hashtag @mention",
    "3.14159",
    "1,000,000",
    "2026-11-21",
    "(parenthesis) [brackets] {braces}",
    "...",
    "?!?!",
    "---",
    "'",
    "''",
    "'s",
    "'S",
    "'LL",
    "O'Brien",
    "rock 'n' roll",
    "\x00null\x01control\x1f",
    "\x7fdel",
    "e\u0301 combining",
    "Å vs A\u030a",
    "ﬁnancial ligature",
]
LONG = ["word " * 100, "x" * 500, "supercalifragilisticexpialidocious " * 20, "🎉" * 200, ""]


def _mutate(rng: random.Random, text: str) -> str:
    choice = rng.randrange(8)
    if choice == 0:
        return text.upper()
    if choice == 1:
        return "".join(c.upper() if rng.random() < 0.5 else c for c in text)
    if choice == 2:
        return text + rng.choice(["!", "?", "...", " :)", ",", ";", " -- "])
    if choice == 3:
        return text.replace(" ", rng.choice(["  ", "\t", "\n", " \u00a0 ", "   "]))
    if choice == 4:
        return f"{text} {rng.choice(ADDITIONS)}"
    if choice == 5:
        return f"{rng.choice(ADDITIONS)} {text}"
    if choice == 6:
        return text.replace("a", "&amp;").replace("e", "&#233;")
    return " ".join(rng.sample(text.split(), k=len(text.split()))) if text.split() else text


def corpus(size: int = 1200, seed: int = 2026) -> list[str]:
    """Realistic queries, every odd script and character class above, and their mutations."""
    rng = random.Random(seed)
    queries = BASE + ADDITIONS + LONG
    while len(queries) < size:
        text = rng.choice(BASE + ADDITIONS)
        for _ in range(rng.randrange(1, 4)):
            text = _mutate(rng, text)
        queries.append(text)
    return queries
