"""An experiment's candidate collection, searched by its name where a search takes the live
collection: the same search path, each collection embedded by its own model version."""

from __future__ import annotations

from query_api.services import LiveCollection, StoreCalls


class NamedCollection(LiveCollection):
    """A collection that no alias resolves: its name is fixed. One dropped meanwhile fails the
    search as the live one would (503), and the experiment answers with the live side alone."""

    def __init__(self, calls: StoreCalls, name: str) -> None:
        super().__init__(calls, alias_cache_s=0.0)
        self.fixed = name

    async def name(self, fresh: bool = False) -> str:
        return self.fixed
