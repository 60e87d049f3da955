"""A photo's near-duplicates, and the largest groups of them (the indexer keeps the groups)."""

from __future__ import annotations

from core.vectorstore import GROUP_FIELD, CollectionNotFound
from query_api.http.errors import ApiError
from query_api.schemas.admin import DuplicateGroup, DuplicateGroups
from query_api.schemas.answers import DuplicatesResponse
from query_api.schemas.search import MAX_DUPLICATE_IDS, DuplicatesPage
from query_api.search.arrange import MAX_GROUP_READ
from query_api.search.pipeline import stored_photo
from query_api.services import LiveCollection, StoreCalls


async def photo_duplicates(
    photo_id: str, page: DuplicatesPage, *, calls: StoreCalls, live: LiveCollection, root: str
) -> DuplicatesResponse:
    """A page of the other photos of a photo's group, in photo id order (of the first
    MAX_GROUP_READ): only the page's photos are read, so a group of thousands answers a page
    as small as any."""
    collection = await live.name()
    store = calls.store
    try:
        found = await calls.run("retrieve", lambda: store.retrieve(collection, [photo_id]))
        if not found:
            raise ApiError(404, f"no photo {photo_id!r} in the index")
        group = str(found[0].payload.get(GROUP_FIELD) or photo_id)
        members = await calls.run(
            "duplicates",
            lambda: store.group_members(collection, [group], limit_each=MAX_GROUP_READ),
        )
        others = [pid for pid in members.get(group, []) if pid != photo_id]
        end = page.offset + page.limit
        ids = others[page.offset : end]
        records = await calls.run("retrieve", lambda: store.retrieve(collection, ids))
    except CollectionNotFound:
        raise ApiError(404, f"no photo {photo_id!r} in the index") from None
    return DuplicatesResponse(
        photo_id=photo_id,
        group=group,
        photos=[stored_photo(root, r) for r in records],
        count=len(others),
        limit=page.limit,
        offset=page.offset,
        next_offset=end if end < len(others) else None,
    )


async def largest_groups(limit: int, *, calls: StoreCalls, live: LiveCollection) -> DuplicateGroups:
    """The `limit` largest groups, largest first, with the first ids of each."""
    collection = await live.name(fresh=True)
    store = calls.store
    sizes = await calls.run("duplicates", lambda: store.group_sizes(collection, limit=limit))
    members = await calls.run(
        "duplicates",
        lambda: store.group_members(
            collection, [g for g, _ in sizes], limit_each=MAX_DUPLICATE_IDS
        ),
    )
    return DuplicateGroups(
        groups=[
            DuplicateGroup(group=group, size=size, ids=members.get(group, []))
            for group, size in sizes
        ]
    )
