"""`photosearch eval`: judgement sets measured on a collection (or two, compared), per mode
and per query tag, with bootstrap intervals.

The evaluation runs where the store is: here, over a Qdrant server or an embedded store that
no process holds; or, where a worker owns the embedded store (`photosearch up`, `photosearch
worker`), on that worker as the `indexer.evaluate` task, since Qdrant Edge admits one process.
"""

from __future__ import annotations

import asyncio
import json
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.quality.judgements import JudgementError, JudgementSet, load_judgements
from core.quality.metrics import Interval
from core.quality.runner import METRICS, MODES, Evaluation, Mode, compare, from_dict
from core.settings import Settings, get_settings
from core.vectorstore import LIVE_ALIAS, VectorStore

if TYPE_CHECKING:
    from redis import Redis

# How long a worker may take over a set: each query is one Triton call and a few searches.
WORKER_TIMEOUT_S = 600
# How long a running worker has to take the task before the command evaluates by itself.
PICKUP_S = 20
_LABELS = {"ndcg": "nDCG@10", "recall": "recall@10", "mrr": "MRR@10"}


class ModeChoice(StrEnum):
    """The rankings to measure: one of the API's text-search modes, or all three."""

    HYBRID = "hybrid"
    VECTOR = "vector"
    KEYWORD = "keyword"
    ALL = "all"


def _adopt_running_up() -> None:
    """Reach the `up` running on this data directory as `photosearch index` does."""
    from photosearch.up.running import adopt_running_up

    line = adopt_running_up(os.environ)
    if line is not None:
        typer.echo(line, err=True)
        get_settings.cache_clear()


def _load(folders: list[Path]) -> list[JudgementSet]:
    try:
        sets = [load_judgements(folder) for folder in folders]
    except JudgementError as exc:
        raise typer.BadParameter(str(exc), param_hint="--judgements") from None
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise typer.BadParameter(
            f"two sets share a folder name: {names}", param_hint="--judgements"
        )
    return sets


def _workers_running(redis: Redis, settings: Settings) -> bool:
    """Whether a worker said lately that it runs (False with no Redis to ask)."""
    from redis.exceptions import RedisError

    from core.deployment import running_workers

    try:
        return bool(running_workers(redis, settings.redis.prefix))
    except RedisError:
        return False


def _evaluate(settings: Settings, request: dict[str, Any]) -> dict[str, Any]:
    """Answered by a running worker where the store is embedded (Qdrant Edge admits one
    process: the worker's, or the API's under `up`); here with a Qdrant server, or where no
    worker takes the task (none runs: its presence outlives it by a minute or so)."""
    from redis import Redis

    from core.unreachable import Reconnecting
    from core.vectorstore import open_store

    if settings.qdrant.url is None:
        redis = Redis.from_url(settings.redis.url, socket_timeout=10, socket_connect_timeout=10)
        try:
            if _workers_running(redis, settings):
                # A Redis that restarts meanwhile loses the task or its answer: the set is
                # asked again (it only reads) once Redis is back.
                found = Reconnecting.from_settings(settings)(
                    lambda: _ask_worker(settings, redis, request)
                )
                if found is not None:
                    return found
        finally:
            redis.close()
    return _answer_here(settings, open_store(settings), request)


def _withdrawn(redis: Redis, queue: str, task_id: str) -> bool:
    """Take the task out of its queue; False where a worker has already taken it."""
    for raw in redis.lrange(queue, 0, -1):
        if json.loads(raw).get("headers", {}).get("id") == task_id:
            return bool(redis.lrem(queue, 1, raw))  # type: ignore[arg-type]
    return False


def _ask_worker(settings: Settings, redis: Redis, request: dict[str, Any]) -> dict[str, Any] | None:
    """The worker's answer; None where no worker took the task within PICKUP_S."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    from core.taskqueue import EVALUATE, control_queue, create_celery
    from core.unreachable import lost

    typer.echo("evaluating on the worker that owns the embedded store", err=True)
    sent = create_celery(settings).send_task(EVALUATE, args=(request,))
    try:
        # A command is never a task (indexer/cli/common.py's call_worker says why the guard is off).
        try:
            found: dict[str, Any] = sent.get(timeout=PICKUP_S, disable_sync_subtasks=False)
        except CeleryTimeout:
            if _withdrawn(redis, control_queue(settings), sent.id):
                backend: Any = sent.backend  # the Redis backend: it waits on the result
                backend.remove_pending_result(sent)
                typer.echo(f"no worker took it within {PICKUP_S} s: evaluating here", err=True)
                return None
            found = sent.get(timeout=WORKER_TIMEOUT_S, disable_sync_subtasks=False)
    except CeleryTimeout:
        typer.echo(f"the worker did not answer within {WORKER_TIMEOUT_S} s", err=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # the worker's refusal: an unknown collection, say
        if lost(exc):  # not the worker's: its Redis went away, to be waited for
            raise
        typer.echo(f"refused: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    return found


def _answer_here(settings: Settings, store: VectorStore, request: dict[str, Any]) -> dict[str, Any]:
    from collections.abc import Sequence

    from core.embedding.arrays import Embeddings
    from core.embedding.client import EmbeddingClient
    from core.embedding.manifest import SearchCalibration
    from core.quality.request import answer
    from core.vectorstore import CollectionNotFound

    loop = asyncio.new_event_loop()

    async def make() -> EmbeddingClient:  # its gRPC channel belongs to this loop
        return EmbeddingClient.from_settings(settings)

    client = loop.run_until_complete(make())

    def embed(texts: Sequence[str], version: int) -> Embeddings:
        return loop.run_until_complete(
            client.encode_texts(texts, model_version=version, timeout_s=120)
        )

    def calibration(version: int) -> SearchCalibration | None:
        return client.manifest(version).calibration

    try:
        return answer(request, store=store, embed=embed, calibration=calibration)
    except CollectionNotFound as exc:
        typer.echo(f"refused: no collection or alias {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        store.close()
        loop.run_until_complete(client.close())
        loop.close()


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [_row(r, widths) for r in rows]


def _tag_counts(evaluation: Evaluation) -> dict[str, int]:
    return {t: sum(t in s.query.tags for s in evaluation.per_query) for t in evaluation.by_tag}


def _single(evaluations: list[Evaluation]) -> list[str]:
    """One collection: a row a mode, then a row a mode and tag."""
    rows = [["MODE", "QUERIES", *(_LABELS[m] for m in METRICS)]]
    for e in evaluations:
        rows.append([e.mode, str(len(e.per_query)), *(str(e.metric(m)) for m in METRICS)])
    for e in evaluations:
        counts = _tag_counts(e)
        for tag, three in e.by_tag.items():
            rows.append([f"{e.mode} {tag}", str(counts[tag]), *map(str, three)])
    return _table(rows)


def _side_by_side(pairs: list[tuple[Evaluation, Evaluation]]) -> list[str]:
    """Two collections: a row a mode and metric (and tag): A, B and the paired B - A."""
    rows = [["MODE", "QUERIES", "METRIC", "A", "B", "B - A (paired)"]]
    for tag in [None, *sorted({t for a, _ in pairs for t in a.by_tag})]:
        for a, b in pairs:
            if tag is not None and tag not in a.by_tag:
                continue
            difference = compare(a, b, tag=tag)
            count = len(a.per_query) if tag is None else _tag_counts(a)[tag]
            for i, metric in enumerate(METRICS):
                mine = a.metric(metric) if tag is None else a.by_tag[tag][i]
                theirs = b.metric(metric) if tag is None else b.by_tag.get(tag, (_NONE,) * 3)[i]
                mode = a.mode if tag is None else f"{a.mode} {tag}"
                rows.append(
                    [mode, str(count), _LABELS[metric], str(mine), str(theirs),
                     _signed(difference[metric])]
                )  # fmt: skip
    return _table(rows)


_NONE = Interval(0.0, 0.0, 0.0)


def _signed(interval: Interval) -> str:
    better = " B better" if interval.low > 0 else " A better" if interval.high < 0 else ""
    return f"{interval.mean:+.3f} [{interval.low:+.3f}, {interval.high:+.3f}]{better}"


def _report(found: dict[str, Any], sets: list[JudgementSet], compared: bool) -> dict[str, Any]:
    """Print the tables; the comparisons, for --json."""
    evaluations = [from_dict(e) for e in found["evaluations"]]
    comparisons: list[dict[str, Any]] = []
    for judgements in sets:
        mine = [e for e in evaluations if e.judgements == judgements.name]
        if not mine:
            continue
        judged = sum(
            any(g > 0 for g in judgements.grades(q.id).values()) for q in judgements.queries
        )
        typer.echo(
            f"\n{judgements.name}: {judged} of {len(judgements.queries)} queries have a "
            f"relevant photo judged  (bootstrap 95%, {mine[0].samples} samples, "
            f"seed {mine[0].seed})"
        )
        collections = list(dict.fromkeys(e.collection for e in mine))
        if not compared:
            typer.echo(f"collection {collections[0]}")
            typer.echo("\n".join(_single(mine)))
            continue
        a_name, b_name = collections[0], collections[-1]
        by = {(e.mode, e.collection): e for e in mine}
        modes = list(dict.fromkeys(e.mode for e in mine))
        pairs = [
            (by[m, a_name], by[m, b_name]) for m in modes if (m, b_name) in by and (m, a_name) in by
        ]
        typer.echo(f"A: {a_name}\nB: {b_name}")
        typer.echo("\n".join(_side_by_side(pairs)))
        for a, b in pairs:
            difference = {m: vars(i) for m, i in compare(a, b).items()}
            comparisons.append(
                {"judgements": a.judgements, "mode": a.mode, "a": a.collection,
                 "b": b.collection, "difference": difference}
            )  # fmt: skip
    for note in found["notes"]:
        typer.echo(f"note: {note}")
    return {**found, "comparisons": comparisons}


def eval_command(
    judgements: Annotated[
        list[Path],
        typer.Option(
            "--judgements",
            metavar="DIR",
            help="A judgement set's folder (queries.tsv and qrels.txt); repeat for more.",
        ),
    ],
    collection: Annotated[
        str, typer.Option(help="The collection or alias to measure.")
    ] = LIVE_ALIAS,
    mode: Annotated[
        ModeChoice, typer.Option(case_sensitive=False, help="The ranking(s) to measure.")
    ] = ModeChoice.ALL,
    compare_with: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="NAME",
            help="A second collection or alias: both side by side, with the paired "
            "difference (B - A) and its interval.",
        ),
    ] = None,
    samples: Annotated[int, typer.Option(min=1, help="Bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option(help="The bootstrap's seed.")] = 0,
    json_file: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="Also write every figure here.")
    ] = None,
) -> None:
    """nDCG@10, recall@10 and MRR@10 of judgement sets, per mode and per query tag, with
    bootstrap 95% intervals; --compare NAME: two collections, paired."""
    from core.atomicfile import write_atomic
    from core.quality.request import evaluation_request

    sets = _load(judgements)
    modes: list[Mode] = list(MODES) if mode == ModeChoice.ALL else [mode.value]  # type: ignore[list-item]
    collections = [collection] if compare_with is None else [collection, compare_with]
    request = evaluation_request(sets, collections, modes, samples=samples, seed=seed)
    _adopt_running_up()
    settings = get_settings()
    found = _evaluate(settings, request)
    report = _report(found, sets, compare_with is not None)
    if json_file is not None:
        write_atomic(json_file, json.dumps(report, indent=2) + "\n")
