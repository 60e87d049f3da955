"""A command's retries of a lost Redis on a clock of the test's: the waits it asked for are
recorded and pass at once, what it said is kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from core.settings import Settings
from core.unreachable import Reconnecting


@dataclass
class Retries:
    """What the commands' Reconnecting did: the waits (seconds) and the lines it said."""

    waits: list[float] = field(default_factory=list)
    said: list[str] = field(default_factory=list)

    def now(self) -> float:
        return sum(self.waits)


def on_a_test_clock(monkeypatch: pytest.MonkeyPatch) -> Retries:
    """Every Reconnecting made from the settings during the test waits on a test clock."""
    retries = Retries()

    def made(
        cls: type[Reconnecting], settings: Settings, say: Callable[[str], None] | None = None
    ) -> Reconnecting:
        return cls(
            settings.lifecycle.reconnect_s,
            retries.said.append,
            now=retries.now,
            sleep=retries.waits.append,
        )

    monkeypatch.setattr(Reconnecting, "from_settings", classmethod(made))
    return retries


def failing_first(
    call: Callable[..., object], errors: Sequence[Exception]
) -> Callable[..., object]:
    """`call`, raising each of `errors` in turn first (a Redis going away, then back)."""
    left = list(errors)

    def flaky(*args: object, **kwargs: object) -> object:
        if left:
            raise left.pop(0)
        return call(*args, **kwargs)

    return flaky
