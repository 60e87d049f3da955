"""The store's neutral requests (core/vectorstore/engine.py) in qdrant-client's models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from qdrant_client import models as qm

from core.vectorstore.base import KEYWORDS_VECTOR, VECTOR_NAME, SearchTuning, SparseVector
from core.vectorstore.boosts import CREATED, DEFAULTS, POPULARITY
from core.vectorstore.engine import (
    Boosted,
    DateRange,
    DeletePoints,
    DeleteVectors,
    Flag,
    HasIds,
    HasVector,
    IsEmpty,
    Leaf,
    Match,
    Nearest,
    NewPoint,
    Prefetch,
    Range,
    Recommend,
    Rrf,
    Scroll,
    Search,
    SetPayload,
    SetVectors,
    Where,
    Write,
    filter_of,
    vectors,
)
from core.vectorstore.filters import walking
from core.vectorstore.schema import CollectionSchema, FieldIndex, Tier

MEMORY = {Tier.PINNED: qm.Memory.PINNED, Tier.CACHED: qm.Memory.CACHED, Tier.COLD: qm.Memory.COLD}
DATATYPES = {"float32": qm.Datatype.FLOAT32, "float16": qm.Datatype.FLOAT16}


def quantization(schema: CollectionSchema) -> qm.QuantizationConfig | None:
    memory = MEMORY[schema.quantized]
    if schema.quantizer == "turbo4":
        bits = qm.TurboQuantBitSize.BITS4
        return qm.TurboQuantization(turbo=qm.TurboQuantQuantizationConfig(bits=bits, memory=memory))
    if schema.quantizer == "int8":
        int8 = qm.ScalarQuantizationConfig(type=qm.ScalarType.INT8, memory=memory)
        return qm.ScalarQuantization(scalar=int8)
    return None


def collection_config(
    dim: int, schema: CollectionSchema, indexes: Mapping[str, FieldIndex], *, bulk: bool
) -> dict[str, Any]:
    """create_collection's keyword arguments for the schema (placement aside)."""
    dense = qm.VectorParams(
        size=dim,
        distance=qm.Distance.COSINE,
        datatype=DATATYPES[schema.datatype],
        memory=MEMORY[schema.originals],
    )
    # The IDF modifier: the server weighs each word by its rarity over the collection (BM25's
    # IDF).
    sparse = qm.SparseVectorParams(
        modifier=qm.Modifier.IDF, index=qm.SparseIndexParams(memory=MEMORY[schema.keywords_index])
    )
    return {
        "vectors_config": {VECTOR_NAME: dense},
        "sparse_vectors_config": {KEYWORDS_VECTOR: sparse},
        # m=0 defers the HNSW graphs of a bulk load: built once by finish_bulk_load, not
        # rebuilt segment after segment while 1e8 points arrive (Qdrant's advice).
        "hnsw_config": qm.HnswConfigDiff(
            m=0 if bulk else schema.hnsw_m,
            ef_construct=schema.hnsw_ef_construct,
            full_scan_threshold=schema.full_scan_threshold_kb,
            payload_m=schema.payload_m(indexes),
            memory=MEMORY[schema.graph],
        ),
        "quantization_config": quantization(schema),
        "payload": qm.PayloadStorageParams(memory=MEMORY[schema.payload]),
        "id_tracker": qm.IdTrackerParams(memory=MEMORY[schema.id_tracker]),
        "optimizers_config": None
        if schema.indexing_threshold_kb is None
        else qm.OptimizersConfigDiff(indexing_threshold=schema.indexing_threshold_kb),
    }


def index_schema(index: FieldIndex) -> qm.PayloadSchemaParams:
    """A payload index's parameters: its tier and subgraph, and an integer's halves."""
    memory, hnsw = MEMORY[index.tier], index.subgraph
    match index.kind:
        case "keyword":
            return qm.KeywordIndexParams(
                type=qm.KeywordIndexType.KEYWORD, enable_hnsw=hnsw, memory=memory
            )
        case "integer":
            return qm.IntegerIndexParams(
                type=qm.IntegerIndexType.INTEGER,
                lookup=index.lookup,
                range=index.range,
                enable_hnsw=hnsw,
                memory=memory,
            )
        case "float":
            return qm.FloatIndexParams(
                type=qm.FloatIndexType.FLOAT, enable_hnsw=hnsw, memory=memory
            )
        case "datetime":
            return qm.DatetimeIndexParams(
                type=qm.DatetimeIndexType.DATETIME, enable_hnsw=hnsw, memory=memory
            )


def sparse(vector: SparseVector) -> qm.SparseVector:
    return qm.SparseVector(indices=list(vector.indices), values=list(vector.values))


def vector(v: list[float] | SparseVector) -> list[float] | qm.SparseVector:
    return sparse(v) if isinstance(v, SparseVector) else v


def condition(c: Leaf) -> qm.Condition:
    match c:
        case Match(field, (value,)):
            return qm.FieldCondition(key=field, match=qm.MatchValue(value=value))
        case Match(field, values):
            return qm.FieldCondition(key=field, match=qm.MatchAny(any=list(values)))
        case DateRange(field, since, until):
            return qm.FieldCondition(key=field, range=qm.DatetimeRange(gte=since, lte=until))
        case Range(field, gte, lte):
            return qm.FieldCondition(key=field, range=qm.Range(gte=gte, lte=lte))
        case Flag(field, value):
            return qm.FieldCondition(key=field, match=qm.MatchValue(value=int(value)))
        case HasIds(ids):
            return qm.HasIdCondition(has_id=sorted(ids))
        case IsEmpty(field):
            return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=field))
        case HasVector(name):
            return qm.HasVectorCondition(has_vector=name)


def where(w: Where | None) -> qm.Filter | None:
    return filter_of(w, condition, qm.Filter)


def params(tuning: SearchTuning | None, w: Where | None) -> qm.SearchParams | None:
    """The search parameters of a search under its filter (filters.walking: ACORN or not)."""
    tuning = walking(tuning, w)
    return (
        None
        if tuning is None
        else tuning.params(qm.SearchParams, qm.QuantizationSearchParams, qm.AcornSearchParams)
    )


def query(q: Nearest | Recommend | Rrf | Boosted) -> tuple[Any, str | None]:
    """The query and the named vector it uses."""
    match q:
        case Boosted():
            return formula(q), None
        case Nearest(v, using):
            return vector(v), using
        case Recommend(positive, negative, using):
            examples = qm.RecommendInput(
                positive=list(positive),
                negative=list(negative),
                strategy=qm.RecommendStrategy.BEST_SCORE,
            )
            return qm.RecommendQuery(recommend=examples), using
        case Rrf(k, weights):
            given = None if weights is None else list(weights)
            return qm.RrfQuery(rrf=qm.Rrf(k=k, weights=given)), None


def formula(b: Boosted) -> qm.FormulaQuery:
    """Boosted as Qdrant's formula (core/vectorstore/boosts.py evaluates the same in Python)."""
    age = qm.ExpDecayExpression(
        exp_decay=qm.DecayParamsExpression(
            x=qm.DatetimeKeyExpression(datetime_key=CREATED),
            target=qm.DatetimeExpression(datetime=b.now.isoformat()),
            midpoint=0.5,
            scale=b.recency_half_life_s,
        )
    )
    # The default date only keeps the decay defined: the condition makes the term 0.
    dated = qm.Filter(must_not=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key=CREATED))])
    share = qm.DivExpression(
        div=qm.DivParams(
            left=POPULARITY,
            right=qm.SumExpression(sum=[POPULARITY, b.popularity_half]),
            by_zero_default=0.0,
        )
    )
    recency = qm.MultExpression(mult=[b.recency_weight, dated, age])
    popular = qm.MultExpression(mult=[b.popularity_weight, share])
    return qm.FormulaQuery(
        formula=qm.SumExpression(sum=["$score", recency, popular]), defaults=DEFAULTS
    )


def payload(fields: Sequence[str] | None) -> qm.PayloadSelectorInclude | bool:
    return True if fields is None else qm.PayloadSelectorInclude(include=list(fields))


def prefetch(p: Prefetch, exact: bool) -> qm.Prefetch:
    """exact: local mode, which searches exactly and warns about search parameters."""
    scoring, using = query(p.query)
    return qm.Prefetch(
        prefetch=[prefetch(n, exact) for n in p.prefetches] or None,
        query=scoring,
        using=using,
        limit=p.limit,
        filter=where(p.filter),
        score_threshold=p.score_threshold,
        params=None if exact else params(p.tuning, p.filter),
    )


def search(s: Search, exact: bool) -> qm.QueryRequest:
    scoring, using = query(s.query)
    return qm.QueryRequest(
        query=scoring,
        using=using,
        prefetch=[prefetch(p, exact) for p in s.prefetches] or None,
        limit=s.limit,
        offset=s.offset,
        filter=where(s.filter),
        score_threshold=s.score_threshold,
        params=None if exact else params(s.tuning, s.filter),
        with_payload=payload(s.fields),
        with_vector=vectors(s.with_vector),
    )


def scroll_options(s: Scroll) -> dict[str, Any]:
    """QdrantClient.scroll's keyword arguments."""
    return {
        "scroll_filter": where(s.filter),
        "limit": s.limit,
        "offset": s.offset,
        "with_payload": payload(s.fields),
        "with_vectors": vectors(s.with_vector),
    }


def point(p: NewPoint) -> qm.PointStruct:
    named: dict[str, Any] = {n: vector(v) for n, v in p.vectors.items()}
    return qm.PointStruct(id=p.point_id, vector=named, payload=p.payload)


def write(w: Write) -> qm.UpdateOperation:
    """Every write but an upsert, which QdrantEngine sends in batches of its own."""
    match w:
        case SetPayload(ids, fields):
            return qm.SetPayloadOperation(
                set_payload=qm.SetPayload(payload=fields, points=list(ids))
            )
        case SetVectors(by_point):
            found = [
                qm.PointVectors(id=pid, vector={n: sparse(v) for n, v in named.items()})
                for pid, named in by_point.items()
            ]
            return qm.UpdateVectorsOperation(update_vectors=qm.UpdateVectors(points=found))
        case DeleteVectors(ids, names):
            gone = qm.DeleteVectors(points=list(ids), vector=list(names))
            return qm.DeleteVectorsOperation(delete_vectors=gone)
        case DeletePoints(ids, None):
            return qm.DeleteOperation(delete=qm.PointIdsList(points=list(ids)))
        case DeletePoints(_, Where() as matching):
            matching_filter = filter_of(matching, condition, qm.Filter)
            return qm.DeleteOperation(delete=qm.FilterSelector(filter=matching_filter))
    raise TypeError(f"not a write of one request: {w!r}")
