"""The dependencies routes declare: who may call (no key, an unknown key, a key without the
scope), the root path a proxy mounted the API under, and a parameter given twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import APIRouter, Depends
from fastapi.testclient import TestClient

from core.vectorstore import VectorStore
from query_api.deps import AdminCaller, ReadCaller, RootPath, SearchMeter, once_each
from tests.unit.query_api.conftest import api_settings, key_of, router_app

router = APIRouter(dependencies=[Depends(once_each)])


@router.get("/read")
async def read(caller: ReadCaller, root: RootPath) -> dict[str, str]:
    return {"caller": caller.name, "root": root}


@router.get("/search")
async def search(meter: SearchMeter) -> dict[str, str]:
    async with meter.paying(1):
        return {"caller": meter.caller.name}


@router.get("/admin")
async def admin(caller: AdminCaller) -> dict[str, str]:
    return {"caller": caller.name}


def client_of(store: VectorStore, folder: Path, *, anonymous: bool) -> TestClient:
    keys = [key_of("ops", "admin-secret", "admin", "search"), key_of("page", "page-secret")]
    settings = api_settings(folder, anonymous=anonymous, keys=keys)
    return TestClient(router_app(settings, store, router), root_path="/photos/")


@pytest.fixture(scope="module")
def private(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    with client_of(shared_store, tmp_path_factory.mktemp("api"), anonymous=False) as client:
        yield client


def test_a_key_is_read_from_either_header(private: TestClient) -> None:
    by_header = private.get("/read", headers={"X-API-Key": "page-secret"})
    by_bearer = private.get("/read", headers={"Authorization": "Bearer page-secret"})
    assert by_header.json() == by_bearer.json() == {"caller": "page", "root": "/photos"}


def test_no_key_an_unknown_key_and_a_missing_scope_are_refused(private: TestClient) -> None:
    assert private.get("/read").status_code == 401
    unknown = private.get("/read", headers={"X-API-Key": "guess"})
    assert (unknown.status_code, unknown.headers["WWW-Authenticate"]) == (
        401,
        'Bearer realm="photosearch"',
    )
    lacking = private.get("/admin", headers={"X-API-Key": "page-secret"})
    assert lacking.status_code == 403
    assert private.get("/admin", headers={"X-API-Key": "admin-secret"}).json() == {"caller": "ops"}


def test_a_search_passes_the_callers_rate_limit_and_says_so(private: TestClient) -> None:
    answer = private.get("/search", headers={"X-API-Key": "page-secret"})
    assert answer.json() == {"caller": "page"}


def test_a_public_api_lets_anyone_search_but_not_administer(
    shared_store: VectorStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("public")
    with client_of(shared_store, folder, anonymous=True) as public:
        assert public.get("/search").json() == {"caller": "anonymous"}
        assert public.get("/admin").status_code == 401


def test_a_scalar_parameter_given_twice_is_ambiguous_but_a_list_repeats(
    private: TestClient,
) -> None:
    key = {"X-API-Key": "page-secret"}
    assert private.get("/read?tags_any=a&tags_any=b", headers=key).status_code == 200
    twice = private.get("/read?limit=1&limit=2", headers=key)
    assert twice.status_code == 422
    assert "limit: give each once" in twice.text
