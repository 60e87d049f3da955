"""One line naming the dependency a command could not reach, where the settings put it (its
secret masked) and the setting to change; any other failure keeps its traceback. A lost Redis
is retried first, with capped backoff up to the limit, on a clock of the test's."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kombu.exceptions import OperationalError
from redis.exceptions import BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from core.embedding.errors import TritonUnavailable
from core.settings import LifecycleSettings, Settings, get_settings
from core.settings_doc import settings_table
from core.unreachable import RECONNECT_VARIABLE, Reconnecting, describe, mask_url
from core.vectorstore import StoreError


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


class Clock:
    """A clock that moves only when the code under test waits; the waits it was asked for."""

    def __init__(self) -> None:
        self.t = 0.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.t += seconds


def failing(*errors: Exception, answer: str = "the job") -> Callable[[], str]:
    """A call that raises each of `errors` in turn, then answers."""
    left = list(errors)

    def call() -> str:
        if left:
            raise left.pop(0)
        return answer

    return call


def retries(limit_s: float, clock: Clock, said: list[str]) -> Reconnecting:
    return Reconnecting(limit_s, said.append, now=clock.now, sleep=clock.sleep)


def test_a_lost_redis_is_retried_with_doubling_waits_and_said_once_each_way(
    settings_from: pytest.MonkeyPatch,
) -> None:
    settings_from.setenv("PHOTOSEARCH_REDIS__URL", "redis://ops:s3cret@queue.internal:6380/0")
    clock, said = Clock(), list[str]()
    refused = RedisConnectionError(
        "Error 111 connecting to queue.internal:6380. Connection refused."
    )
    # Back, but still reading its append-only file: Redis answers LOADING for a while.
    loading = BusyLoadingError("Redis is loading the dataset in memory")
    call = failing(refused, refused, loading)
    assert retries(120, clock, said)(call) == "the job"
    assert clock.waits == [0.5, 1.0, 2.0]
    assert said == [
        "lost Redis at redis://ops:***@queue.internal:6380/0 (PHOTOSEARCH_REDIS__URL): retrying "
        f"for up to 120 s ({RECONNECT_VARIABLE}): Error 111 connecting to queue.internal:6380. "
        "Connection refused.",
        "reconnected after 4 s",
    ]


def test_past_the_limit_the_last_error_is_raised_after_waits_capped_and_cut_to_the_limit() -> None:
    clock, said = Clock(), list[str]()
    errors = [RedisConnectionError(f"refused {n}") for n in range(100)]
    with pytest.raises(RedisConnectionError) as raised:
        retries(20, clock, said)(failing(*errors))
    assert clock.waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 2.5]
    assert clock.t == 20
    assert raised.value is errors[len(clock.waits)]  # the one tried at the limit
    assert len(said) == 1 and said[0].startswith("lost Redis at ")
    # What the command then prints: today's one line, naming Redis and its setting.
    line = describe(raised.value)
    assert line is not None and line.startswith("cannot reach Redis at ")


def test_each_outage_gets_the_whole_limit_once_a_call_has_answered() -> None:
    clock, said = Clock(), list[str]()
    reconnecting = retries(3, clock, said)
    for _ in range(2):  # two restarts in a row, a poll answered between them
        assert reconnecting(failing(*[RedisConnectionError("refused")] * 3)) == "the job"
    assert clock.waits == [0.5, 1.0, 1.5, 0.5, 1.0, 1.5]
    assert [line.split(":")[0] for line in said] == [
        "lost Redis at redis",
        "reconnected after 3 s",
    ] * 2


def test_the_broker_s_lost_connection_is_retried_and_named_too() -> None:
    clock, said = Clock(), list[str]()
    assert retries(120, clock, said)(failing(OperationalError("Connection refused"))) == "the job"
    assert said[0].startswith("lost the Celery broker (Redis) at ")


@pytest.mark.parametrize("error", [ResponseError("WRONGTYPE"), ValueError("a bug")])
def test_any_other_failure_is_raised_at_once_untried(error: Exception) -> None:
    clock, said = Clock(), list[str]()
    with pytest.raises(type(error)):
        retries(120, clock, said)(failing(error))
    assert (clock.waits, said) == ([], [])


def test_a_limit_of_zero_gives_up_at_once_saying_nothing() -> None:
    clock, said = Clock(), list[str]()
    with pytest.raises(RedisConnectionError):
        retries(0, clock, said)(failing(RedisConnectionError("refused")))
    assert (clock.waits, said) == ([], [])


def test_the_limit_is_the_setting_s_and_the_waiting_is_said_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings(lifecycle=LifecycleSettings(reconnect_s=45))
    reconnecting = Reconnecting.from_settings(settings)
    assert reconnecting.limit_s == 45
    reconnecting.sleep = Clock().sleep
    assert reconnecting(failing(RedisConnectionError("refused"))) == "the job"
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("lost Redis at ") and "up to 45 s" in err
    assert LifecycleSettings().reconnect_s == 120
    assert f"`{RECONNECT_VARIABLE}`" in settings_table()
