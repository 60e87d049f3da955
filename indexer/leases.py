"""Leases: a lock a dead owner cannot hold past its lease, and the tokens a worker holds.

A `LeasedLock` is taken for `lease_s` and renewed by a thread of its owner every third of it,
so a worker killed while it holds one (inside `finalize`, say) lets it go within the lease,
not after a timeout long enough for the longest step. The work queue's tokens are leased the
same way (indexer/queue/workqueue.py): `held_tokens` says which a worker holds, for its
heartbeat (indexer/rounds.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any, Protocol

from redis import Redis
from redis.exceptions import LockError, RedisError
from redis.lock import Lock

log = logging.getLogger(__name__)


class LeasedLock(Lock):
    """A Redis lock held `lease_s` at a time, renewed while its owner's process lives."""

    def __init__(self, redis: Redis, name: str, *, lease_s: float) -> None:
        # The renewing thread reads the owner's token: it must not be thread-local.
        super().__init__(redis, name, timeout=lease_s, thread_local=False)
        self.lease_s = lease_s
        self._stop: threading.Event | None = None

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        taken: bool = super().acquire(*args, **kwargs)
        if taken:
            self._stop = threading.Event()
            threading.Thread(
                target=self._renew, args=(self._stop,), name=f"lease {self.name}", daemon=True
            ).start()
        return taken

    def release(self) -> None:
        """Let go; a lock whose lease ran out (its renewals failed longer than the lease) is
        someone else's or no one's now, and is left as it is."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        try:
            super().release()
        except LockError:
            log.warning("lock %s: its lease had run out when its owner let it go", self.name)

    def _renew(self, stop: threading.Event) -> None:
        while not stop.wait(self.lease_s / 3):
            try:
                self.reacquire()
            except LockError:  # the lease ran out (a pause longer than it): the lock is lost
                log.warning("lock %s: lost its lease before its owner let it go", self.name)
                return
            except RedisError:  # Redis down: the next renewal tries again
                continue


class Request(Protocol):
    """What `held_tokens` reads of a Celery request."""

    @property
    def id(self) -> str: ...

    @property
    def task_name(self) -> str: ...

    @property
    def args(self) -> Any: ...


def held_tokens(requests: Iterable[Request], token_tasks: Iterable[str]) -> dict[str, list[str]]:
    """The tokens among a worker's requests (received or running), by job id: the tasks of
    `token_tasks`, whose first argument is their job's id."""
    names = set(token_tasks)
    held: dict[str, list[str]] = {}
    for request in list(requests):
        if request.task_name in names and request.args:
            held.setdefault(str(request.args[0]), []).append(str(request.id))
    return held
