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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

# Cases per operation and mode (positive, negative): about 16 operations x 2 x 150 requests
# take ~2 minutes here; generation is derandomized, so CI sends the same requests each run.
MAX_EXAMPLES = 150
KEYLESS_EXAMPLES = 25
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
