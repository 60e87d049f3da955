"""One line instead of a traceback when a dependency of a command cannot be reached.

The command failed because Redis, the Celery broker, Triton or the vector store did not answer:
what the operator needs is which one, where the settings say it is (secrets masked) and the
setting that points there.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from core.settings import Settings, get_settings


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


def describe(exc: BaseException) -> str | None:
    """The one line for a failure to reach a dependency; None for any other exception."""
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout

    from core.embedding.errors import TritonTimeout, TritonUnavailable
    from core.vectorstore.base import StoreError

    settings = _settings()
    if isinstance(exc, RedisConnectionError | RedisTimeout):
        url = mask_url(settings.redis.url) if settings else "?"
        return f"cannot reach Redis at {url} (PHOTOSEARCH_REDIS__URL): {_reason(exc)}"
    if isinstance(exc, OperationalError):
        url = mask_url(settings.redis.url) if settings else "?"
        return (
            f"cannot reach the Celery broker (Redis) at {url} (PHOTOSEARCH_REDIS__URL): "
            f"{_reason(exc)}"
        )
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
