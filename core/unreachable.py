"""A dependency of a command that cannot be reached: one line instead of a traceback, and the
retries that ride out its restart.

The command failed because Redis, the Celery broker, Triton or the vector store did not answer:
what the operator needs is which one, where the settings say it is (secrets masked) and the
setting that points there. A lost connection to Redis (a restart, a failover) is retried first,
for PHOTOSEARCH_LIFECYCLE__RECONNECT_S, and said so while the command waits.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from core.settings import Settings, get_settings

T = TypeVar("T")
RECONNECT_VARIABLE = "PHOTOSEARCH_LIFECYCLE__RECONNECT_S"


def mask_url(url: str) -> str:
    """The URL with its password (and a user that is the whole credential) replaced by ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    user = parts.username if parts.password is not None else None
    credentials = f"{user}:***" if user else "***"
    return urlunsplit(parts._replace(netloc=f"{credentials}@{netloc}"))


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _settings() -> Settings | None:
    try:
        return get_settings()
    except Exception:  # invalid settings say so on their own; only the message is lost here
        return None


def lost(exc: BaseException) -> str | None:
    """Which Redis a connection lost (refused, reset, timed out, still loading its data) was
    to, where the settings put it and the setting: "Redis at URL (PHOTOSEARCH_REDIS__URL)";
    None for any other failure."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    if not isinstance(exc, RedisConnectionError | RedisTimeout | OperationalError):
        return None
    settings = _settings()
    url = mask_url(settings.redis.url) if settings else "?"
    what = "Redis" if not isinstance(exc, OperationalError) else "the Celery broker (Redis)"
    return f"{what} at {url} (PHOTOSEARCH_REDIS__URL)"


def describe(exc: BaseException) -> str | None:
    """The one line for a failure to reach a dependency; None for any other exception."""
    from core.embedding.errors import TritonTimeout, TritonUnavailable
    from core.vectorstore.base import StoreError

    settings = _settings()
    redis = lost(exc)
    if redis is not None:
        return f"cannot reach {redis}: {_reason(exc)}"
    if isinstance(exc, TritonUnavailable | TritonTimeout):
        url = mask_url(settings.triton.url) if settings else "?"
        return f"cannot reach Triton at {url} (PHOTOSEARCH_TRITON__URL): {_reason(exc)}"
    if isinstance(exc, StoreError):
        if settings is not None and settings.qdrant.url:
            where = f"Qdrant at {mask_url(settings.qdrant.url)}"
        else:
            path = settings.qdrant.path if settings else None
            where = f"the embedded vector store at {path}"
        return f"vector store failed: {where} (PHOTOSEARCH_QDRANT__URL): {_reason(exc)}"
    return None


def _on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # the stream of the moment: a test's capture too


class Reconnecting:
    """Calls run again while they fail for a lost Redis connection: a command that waits on a
    job rides out a restart of its Redis instead of reporting a failure that did not happen.

    The waits double from `first_s` to `cap_s`, for up to `limit_s` from the failure; the
    outage is said once as it begins and once as it ends. Past the limit the last error is
    raised, for the command's one line (`describe`). Each call's outage is its own: a call
    that answered resets the limit, so two restarts in a row are each ridden out.
    """

    def __init__(
        self,
        limit_s: float,
        say: Callable[[str], None],
        *,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        first_s: float = 0.5,
        cap_s: float = 5.0,
    ) -> None:
        """Args:
        limit_s: how long an outage is waited out (PHOTOSEARCH_LIFECYCLE__RECONNECT_S).
        say: told the lines about the outage (a command's stderr).
        now, sleep: the clock and the wait between tries.
        first_s, cap_s: the first wait and the longest.
        """
        self.limit_s = limit_s
        self.say = say
        self.now = now
        self.sleep = sleep
        self.first_s = first_s
        self.cap_s = cap_s

    @classmethod
    def from_settings(
        cls, settings: Settings, say: Callable[[str], None] | None = None
    ) -> Reconnecting:
        """The settings' limit; said on stderr unless `say` is given."""
        return cls(settings.lifecycle.reconnect_s, say or _on_stderr)

    def __call__(self, call: Callable[[], T]) -> T:
        """`call()`'s answer, tried again while it loses its Redis, up to the limit.

        Raises:
            Exception: whatever `call` raised that is not a lost connection, at once; a lost
                connection's error once the limit has passed.
        """
        since: float | None = None
        wait = self.first_s
        while True:
            try:
                answer = call()
            except Exception as exc:
                what = lost(exc)
                if what is None:
                    raise
                at = self.now()
                if since is None:
                    if self.limit_s <= 0:
                        raise
                    since = at
                    self.say(
                        f"lost {what}: retrying for up to {self.limit_s:g} s "
                        f"({RECONNECT_VARIABLE}): {_reason(exc)}"
                    )
                left = since + self.limit_s - at
                if left <= 0:
                    raise
                self.sleep(min(wait, left))
                wait = min(wait * 2, self.cap_s)
                continue
            if since is not None:
                self.say(f"reconnected after {self.now() - since:.0f} s")
            return answer
