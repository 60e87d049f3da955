"""Schemathesis against the live API: every operation of its /openapi.json, generated requests.

Valid and invalid requests (schemathesis' positive and negative modes) go over real HTTP to
an API server set up as the other API tests set it up (real Triton, Redis, Qdrant Edge).
No answer may be a 5xx or take longer than the request timeout; every 4xx is our JSON error
with a message; every answer that the schema documents has the documented shape.

The admin operations act for real, on this test's own Redis prefix: a sync or reindex of a
generated source is recorded as a job and queued on the prefix's own Celery queues, where no
worker listens (a generated source must not make a worker walk this machine's disk); a
rollback waits `admin_wait_s` for that absent worker and answers 202.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis.configuration import set_hypothesis_home_dir
from requests.structures import CaseInsensitiveDict
from schemathesis import APIOperation, Case, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from core.settings import Settings
from model.triton_server import TritonServer
from tests.support.api import ADMIN_KEY, SEARCH_KEY, api_settings, indexed_api

# Cases per operation and mode (positive, negative). Generation is derandomized (a fixed
# seed): every run sends the same requests. 12 each, about 500 requests over the 21
# operations, keep the suite's run short; FUZZ_EXAMPLES=150 is the deeper run (5 minutes
# on a busy 2-core machine).
MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
KEYLESS_EXAMPLES = max(2, MAX_EXAMPLES // 6)
REQUEST_TIMEOUT_S = 30.0  # a hang fails the case instead of blocking the suite
OPEN = ("/healthz", "/readyz")  # every other operation needs a key
Operation = APIOperation[Any, Any, Any, Any]
AnyCase = Case[Any]
SETTINGS = hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,  # the same cases on every run: CI is not a lottery
    database=None,  # nothing written under .hypothesis/ in the repository
    deadline=None,  # a loaded machine is slow, not wrong; the request timeout bounds a hang
    suppress_health_check=list(hypothesis.HealthCheck),
    print_blob=False,
    # No shrinking: each step is a live request, and the failing case itself is reported.
    phases=(hypothesis.Phase.explicit, hypothesis.Phase.generate),
)


@pytest.fixture(scope="module", autouse=True)
def hypothesis_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Hypothesis' caches (unicode tables, constants) go to a temporary folder, not the checkout.
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield
    set_hypothesis_home_dir(None)


@dataclass
class Live:
    url: str
    settings: Settings


@pytest.fixture(scope="module")
def live(
    triton: TritonServer, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("schemathesis")
    # A rollback waits this long for a worker; none runs here, so each answers 202 at once.
    settings = api_settings(tmp / "data", triton.url, repository, admin_wait_s=0.05, docs=True)
    settings.indexer.source = (tmp / "photos").as_uri()
    with indexed_api(settings, tmp / "photos", 8) as served:
        yield Live(served.server.url, settings)


def load(live: Live) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(live.url + "/openapi.json", timeout=REQUEST_TIMEOUT_S)
    schema.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        deterministic=True,
        database="none",
    )
    return schema


@pytest.fixture(scope="module")
def api_schema(live: Live) -> schemathesis.BaseSchema:
    """The live app's own /openapi.json, as a client would read it."""
    schema = schemathesis.openapi.from_url(live.url + "/openapi.json", timeout=REQUEST_TIMEOUT_S)
    schema.config.generation.update(deterministic=True, database="none")
    return schema


def operations(schema: schemathesis.BaseSchema) -> list[Operation]:
    found = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()  # an operation the schema describes wrongly fails the test
        found.append(result.ok())
    assert len(found) >= 16, [op.label for op in found]
    return found


def negative_data_rejected(ctx: Any, response: Any, case: AnyCase) -> bool | None:
    """negative_data_rejection, except for type mutations of query parameters alone.

    A query string is text: a string parameter "mutated" to a boolean arrives as "false", a
    valid string. Schemathesis lets one such mutation pass, not two in one case (`license`
    and `tags_any` both "became" booleans: `?license=false&tags_any=false` is a valid search).
    Any other violation (a length, a pattern, an enum, a body) is still checked.
    """
    meta = case.meta
    mutations = getattr(meta.phase.data, "mutations", None) if meta is not None else None
    if mutations and all(
        m.parameter_location is ParameterLocation.QUERY and m.keywords == ("type",)
        for m in mutations
    ):
        return None
    result: bool | None = negative_data_rejection(ctx, response, case)
    return result


# No 5xx; every status, content type, header and body as the schema documents them; and
# a request that breaks the schema (negative mode) is refused, never answered 2xx.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejected,
]


def answered_as_documented(case: AnyCase, response: Response) -> None:
    """Schemathesis' checks pass, and a 4xx is our JSON error with a message."""
    case.validate_response(response, checks=CHECKS)
    if 400 <= response.status_code < 500:
        [content_type] = response.headers.get("content-type", [""])
        assert content_type.startswith("application/json"), (response.status_code, response.text)
        body = response.json()
        assert isinstance(body, dict) and body.get("error"), body
        assert isinstance(body.get("message"), str) and body["message"].strip(), body


def fuzz(
    operation: Operation, mode: GenerationMode, examples: int, send: Callable[[AnyCase], None]
) -> int:
    """Send up to `examples` generated cases of one operation; returns how many were sent.

    Negative cases need a constraint to break: an operation whose every input is valid
    (no parameters, or free strings only) has none, which hypothesis reports as unsatisfiable.
    """
    sent = 0

    @hypothesis.settings(SETTINGS, max_examples=examples)
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def run(case: AnyCase) -> None:
        nonlocal sent
        sent += 1
        send(case)

    try:
        run()
    except hypothesis.errors.Unsatisfiable:
        if mode is GenerationMode.POSITIVE or sent:
            raise
    return sent


def each_operation(
    schema: schemathesis.BaseSchema, examples: int, send: Callable[[AnyCase], None]
) -> dict[str, int]:
    """Fuzz every operation in both modes; fail with every failing operation named."""
    counts: dict[str, int] = {}
    failures: list[str] = []
    for operation in operations(schema):
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            label = f"{operation.label} ({mode.value})"
            try:
                counts[label] = fuzz(operation, mode, examples, send)
            except (Exception, FailureGroup) as exc:  # collected: one run names every failure
                failures.append(f"{label}: {type(exc).__name__}: {str(exc)[:3000]}")
    print("\nschemathesis cases per operation:", json.dumps(counts, indent=1))
    assert not failures, "\n\n".join(failures)
    return counts


def test_every_operation_answers_generated_requests_without_a_5xx(
    api_schema: schemathesis.BaseSchema,
) -> None:
    def send(case: AnyCase) -> None:
        key = ADMIN_KEY if case.path.startswith("/v1/admin") else SEARCH_KEY
        # The key replaces whatever the generated X-API-Key / Authorization parameters hold.
        headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        case.headers = CaseInsensitiveDict({**headers, "X-API-Key": key})
        answered_as_documented(case, case.call(timeout=REQUEST_TIMEOUT_S))

    counts = each_operation(api_schema, MAX_EXAMPLES, send)
    # Every operation took generated valid requests, enough of them where inputs vary.
    assert all(counts[f"{op.label} (positive)"] >= 1 for op in operations(api_schema)), counts
    assert counts["GET /v1/search (positive)"] == MAX_EXAMPLES, counts
    assert counts["POST /v1/search/image (negative)"] == MAX_EXAMPLES, counts


def test_without_a_key_no_protected_operation_answers_2xx(
    api_schema: schemathesis.BaseSchema,
) -> None:
    refused: dict[str, int] = {}

    def send(case: AnyCase) -> None:
        case.headers = CaseInsensitiveDict(
            {
                k: v
                for k, v in (case.headers or {}).items()
                if k.lower() not in ("x-api-key", "authorization")
            }
        )
        response = case.call(timeout=REQUEST_TIMEOUT_S)
        answered_as_documented(case, response)
        if case.path.startswith(OPEN):
            return
        # A 4xx of any kind: 401, or a body or route refused before the key is asked for.
        assert 400 <= response.status_code < 500, (response.status_code, response.text)
        if response.status_code == 401:
            assert "API key" in response.json()["message"], response.text
            refused[case.operation.label] = refused.get(case.operation.label, 0) + 1

    each_operation(api_schema, KEYLESS_EXAMPLES, send)
    protected = {op.label for op in operations(api_schema) if not op.path.startswith(OPEN)}
    assert set(refused) == protected, refused  # each was really asked for a key


# -- what schemathesis does not generate: lone surrogates and deep nesting ------------------
# Hypothesis leaves lone surrogates out of the text it generates, and schemathesis nests JSON
# no deeper than the schema does: both once reached a 500 (issue 33, F5). So, from a few
# generated valid requests of each operation, one request per parameter and JSON field with
# that one holding a lone surrogate (a query's as its UTF-8 bytes, percent-encoded; a JSON
# field's as JSON's \ud800 escape), and the body replaced by arrays and by objects nested
# 30,000 deep.
HOSTILE_CASES = 2  # valid requests per operation to start from
HOSTILE_TEXT = "a\ud800b"
DEEP = 30_000
Sent = tuple[str, str, bytes | None, str | None]  # method, path and query, body, media type


def _encoded(text: str) -> str:
    """Percent-encoded as a careless client does it: a surrogate's UTF-8 form, ED A0 80."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _target(path: str, query: dict[str, Any]) -> str:
    pairs = [
        (k, v)
        for k, values in query.items()
        for v in (values if isinstance(values, list) else [values])
    ]
    return path + (
        "?" + "&".join(f"{quote(k)}={_encoded(_text(v))}" for k, v in pairs) if pairs else ""
    )


def _body_fields(schema: schemathesis.BaseSchema, operation: Operation) -> dict[str, bool]:
    """The JSON body's fields, each with whether it takes a list."""
    content = operation.definition.raw.get("requestBody", {}).get("content", {})
    body = content.get("application/json", {}).get("schema", {})
    if "$ref" in body:
        body = schema.raw_schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    fields = {}
    for name, spec in body.get("properties", {}).items():
        kinds = [spec, *spec.get("anyOf", [])]
        fields[name] = any(k.get("type") == "array" for k in kinds)
    return fields


def hostile_requests(case: AnyCase, fields: dict[str, bool]) -> Iterator[Sent]:
    """`case` sent again with one parameter or field at a time holding a lone surrogate, then
    with its body nested `DEEP` deep."""
    parameters = case.operation.definition.raw.get("parameters", [])
    query = dict(case.query or {})
    json_body = (
        case.body if isinstance(case.body, dict) and case.media_type == "application/json" else None
    )
    media = "application/json" if json_body is not None else None
    body = json.dumps(json_body).encode() if json_body is not None else None
    for parameter in parameters:
        name = parameter["name"]
        if parameter["in"] == "query":
            yield (
                case.method,
                _target(case.formatted_path, {**query, name: HOSTILE_TEXT}),
                body,
                media,
            )
        elif parameter["in"] == "path":
            path = case.path.format(
                **{**(case.path_parameters or {}), name: _encoded(HOSTILE_TEXT)}
            )
            yield case.method, _target(path, query), body, media
    for name, is_list in fields.items():
        hostile = {**(json_body or {}), name: [HOSTILE_TEXT] if is_list else HOSTILE_TEXT}
        yield (
            case.method,
            _target(case.formatted_path, query),
            json.dumps(hostile).encode(),
            "application/json",
        )
    for deep in (b"[" * DEEP + b"]" * DEEP, b'{"a":' * DEEP + b"1" + b"}" * DEEP):
        yield case.method, _target(case.formatted_path, query), deep, "application/json"


def test_every_parameter_and_field_answers_lone_surrogates_and_deep_nesting_without_a_5xx(
    live: Live, api_schema: schemathesis.BaseSchema
) -> None:
    """No 5xx, and every 4xx our JSON error, for every operation of the live schema."""
    counts: dict[str, int] = {}
    failures: list[str] = []
    with httpx.Client(base_url=live.url, timeout=REQUEST_TIMEOUT_S) as client:

        def send(case: AnyCase, fields: dict[str, bool]) -> None:
            key = ADMIN_KEY if case.path.startswith("/v1/admin") else SEARCH_KEY
            for method, target, body, media in hostile_requests(case, fields):
                headers = {"X-API-Key": key, **({"Content-Type": media} if media else {})}
                response = client.request(method, target, content=body, headers=headers)
                said = (
                    method,
                    target[:300],
                    (body or b"")[:200],
                    response.status_code,
                    response.text[:300],
                )
                assert response.status_code < 500, said
                if response.status_code >= 400:
                    assert response.headers["content-type"].startswith("application/json"), said
                    error = response.json()
                    assert error.get("error") and str(error.get("message", "")).strip(), said
                counts[case.operation.label] = counts.get(case.operation.label, 0) + 1

        for operation in operations(api_schema):
            fields = _body_fields(api_schema, operation)
            try:
                fuzz(
                    operation, GenerationMode.POSITIVE, HOSTILE_CASES, partial(send, fields=fields)
                )
            except (Exception, FailureGroup) as exc:  # collected: one run names every failure
                failures.append(f"{operation.label}: {type(exc).__name__}: {str(exc)[:3000]}")
    print("\nhostile requests per operation:", json.dumps(counts, indent=1))
    assert not failures, "\n\n".join(failures)
    assert set(counts) == {op.label for op in operations(api_schema)}, counts
    # Among them the request that once was a 500: a `not` holding a surrogate, the rest valid.
    [search] = [op for op in operations(api_schema) if op.label == "POST /v1/search"]
    assert _body_fields(api_schema, search)["not"] is True
