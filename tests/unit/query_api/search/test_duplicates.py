"""A photo's near-duplicates and the largest groups, on the in-process store: the indexer's
groups read back, a photo never its own duplicate, a photo not indexed a 404."""

from __future__ import annotations

import pytest

from core.payload import PhotoPayload
from core.vectorstore import GROUP_FIELD, VectorStore
from query_api.http.errors import ApiError
from query_api.schemas.search import DuplicatesPage
from query_api.search.duplicates import largest_groups, photo_duplicates
from query_api.services import LiveCollection, StoreCalls
from tests.unit.query_api.conftest import LIVE


@pytest.fixture(autouse=True)
def groups(shared_store: VectorStore) -> None:
    cats: PhotoPayload = {GROUP_FIELD: "cats"}
    shared_store.set_payloads(LIVE, {"cat-1": cats, "cat-2": cats})


async def test_a_photos_duplicates_are_the_others_of_its_group(
    calls: StoreCalls, live: LiveCollection
) -> None:
    found = await photo_duplicates("cat-2", DuplicatesPage(), calls=calls, live=live, root="/api")
    assert (found.group, [p.id for p in found.photos]) == ("cats", ["cat-1"])
    assert (found.count, found.next_offset) == (1, None)
    assert found.photos[0].thumbnail_url == "/api/v1/photos/cat-1/thumbnail"


async def test_a_photo_alone_has_no_duplicates_and_one_not_indexed_is_a_404(
    calls: StoreCalls, live: LiveCollection
) -> None:
    alone = await photo_duplicates("dog-1", DuplicatesPage(), calls=calls, live=live, root="")
    assert (alone.group, alone.photos) == ("dog-1", [])
    with pytest.raises(ApiError) as missing:
        await photo_duplicates("unicorn-1", DuplicatesPage(), calls=calls, live=live, root="")
    assert missing.value.status == 404


async def test_the_largest_groups_come_first(calls: StoreCalls, live: LiveCollection) -> None:
    largest = await largest_groups(1, calls=calls, live=live)
    assert [(g.group, g.size, g.ids) for g in largest.groups] == [("cats", 2, ["cat-1", "cat-2"])]
