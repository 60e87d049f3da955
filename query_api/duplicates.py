"""A photo's near-duplicates, and the largest groups of them (the indexer keeps the groups)."""

from __future__ import annotations

from core.vectorstore import GROUP_FIELD, CollectionNotFound
from query_api.arrange import MAX_GROUP_READ
from query_api.errors import ApiError
from query_api.schemas import MAX_DUPLICATE_IDS, DuplicatesResponse
from query_api.schemas_admin import DuplicateGroup, DuplicateGroups
from query_api.search import stored_photo
from query_api.services import Services


async def photo_duplicates(svc: Services, root: str, photo_id: str) -> DuplicatesResponse:
    """The other photos of a photo's group, in photo id order (the first MAX_GROUP_READ)."""
    collection = await svc.live_collection()
    try:
        found = await svc.in_store("retrieve", lambda: svc.store.retrieve(collection, [photo_id]))
        if not found:
            raise ApiError(404, f"no photo {photo_id!r} in the index")
        group = str(found[0].payload.get(GROUP_FIELD) or photo_id)
        members = await svc.in_store(
            "duplicates",
            lambda: svc.store.group_members(collection, [group], limit_each=MAX_GROUP_READ),
        )
        others = [pid for pid in members.get(group, []) if pid != photo_id]
        records = await svc.in_store("retrieve", lambda: svc.store.retrieve(collection, others))
    except CollectionNotFound:
        raise ApiError(404, f"no photo {photo_id!r} in the index") from None
    return DuplicatesResponse(
        photo_id=photo_id, group=group, photos=[stored_photo(root, r) for r in records]
    )


async def largest_groups(svc: Services, limit: int) -> DuplicateGroups:
    collection = await svc.live_collection(fresh=True)
    sizes = await svc.in_store("duplicates", lambda: svc.store.group_sizes(collection, limit=limit))
    members = await svc.in_store(
        "duplicates",
        lambda: svc.store.group_members(
            collection, [g for g, _ in sizes], limit_each=MAX_DUPLICATE_IDS
        ),
    )
    return DuplicateGroups(
        groups=[
            DuplicateGroup(group=group, size=size, ids=members.get(group, []))
            for group, size in sizes
        ]
    )
