"""One line naming the dependency a command could not reach, where the settings put it (its
secret masked) and the setting to change; any other failure keeps its traceback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from core.embedding.errors import TritonUnavailable
from core.settings import get_settings
from core.vectorstore import StoreError
from photosearch.unreachable import describe, mask_url


@pytest.fixture
def settings_from(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Settings read again from the environment this test sets."""
    get_settings.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    get_settings.cache_clear()


def test_a_password_is_masked_and_the_rest_of_the_url_kept() -> None:
    assert (
        mask_url("redis://ops:s3cret@cache.internal:6390/2")
        == "redis://ops:***@cache.internal:6390/2"
    )
    assert mask_url("https://token@qdrant.example/x") == "https://***@qdrant.example/x"
    assert mask_url("redis://[::1]:6390/0") == "redis://[::1]:6390/0"
    assert mask_url("grpc://triton:8001") == "grpc://triton:8001"


def test_redis_out_of_reach_is_named_with_its_masked_url_and_setting(
    settings_from: pytest.MonkeyPatch,
) -> None:
    settings_from.setenv("PHOTOSEARCH_REDIS__URL", "redis://ops:s3cret@cache.internal:6390/0")
    line = describe(RedisConnectionError("Connection refused."))
    assert line == (
        "cannot reach Redis at redis://ops:***@cache.internal:6390/0 (PHOTOSEARCH_REDIS__URL): "
        "Connection refused."
    )


def test_triton_and_the_store_are_named_too(settings_from: pytest.MonkeyPatch) -> None:
    settings_from.setenv("PHOTOSEARCH_TRITON__URL", "triton.internal:8001")
    settings_from.setenv("PHOTOSEARCH_QDRANT__URL", "http://qdrant.internal:6333")
    assert describe(TritonUnavailable("down")) == (
        "cannot reach Triton at triton.internal:8001 (PHOTOSEARCH_TRITON__URL): down"
    )
    assert describe(StoreError("timed out")) == (
        "vector store failed: Qdrant at http://qdrant.internal:6333 (PHOTOSEARCH_QDRANT__URL): "
        "timed out"
    )


def test_any_other_failure_is_not_described() -> None:
    assert describe(ValueError("a bug")) is None
