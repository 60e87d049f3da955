"""The quality gate's figures as `photosearch index status` shows them under a reindex job:
its decision, then the live and the new collection side by side, a row per set and metric."""

from __future__ import annotations

import json
from typing import Any

from core.quality.metrics import Interval

_NAMES = {"ndcg": "nDCG@10", "recall": "recall@10", "mrr": "MRR@10"}


def _difference(figure: dict[str, float]) -> str:
    return f"{figure['mean']:+.3f} [{figure['low']:+.3f}, {figure['high']:+.3f}]"


def gate_lines(quality: str, indent: str = "    ") -> list[str]:
    """The lines of a job record's `quality` JSON (none when the gate has not run)."""
    if not quality:
        return []
    record: dict[str, Any] = json.loads(quality)
    lines = [f"{indent}quality gate: {record['message']}"]
    sets = record.get("sets") or []
    if not sets:
        return lines
    live = f"LIVE m{record['live']['model_version']}"
    new = f"NEW m{record['new']['model_version']}"
    header = ["SET", "QUERIES", "METRIC", live, new, "NEW - LIVE", ""]
    rows = [
        [
            found["name"] if metric == "ndcg" else "",
            str(found["queries"]) if metric == "ndcg" else "",
            name,
            str(Interval(**found["live"][metric])),
            str(Interval(**found["new"][metric])),
            _difference(found["difference"][metric]),
            "refused" if metric == "ndcg" and found["failed"] else "",
        ]
        for found in sets
        for metric, name in _NAMES.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append(f"{indent}  " + "  ".join(cells).rstrip())
    return lines
