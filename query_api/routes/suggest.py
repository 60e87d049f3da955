"""Suggestions as a searcher types: completions from popular queries and the collection's
words, answered from the replica's in-memory index."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from query_api.deps import ReadCaller, once_each
from query_api.routes.search import ERRORS
from query_api.schemas.suggest import SuggestionItem, SuggestQuery, SuggestResponse
from query_api.suggest.suggestions import Suggestions

router = APIRouter(prefix="/v1", tags=["suggest"], dependencies=[Depends(once_each)])

# The search scope, and no token of the search rate limit: a lookup costs microseconds of
# the replica's memory (no embedding, no store, no Redis), and a page asks one per keystroke;
# charging a bucket would cost a Redis round trip, more than the answer. Like a thumbnail.
SUGGEST_ERRORS: dict[int | str, dict[str, object]] = {c: ERRORS[c] for c in (401, 403, 422)}
# A browser keeps an answer this long: typing back over a prefix asks nothing again. The
# index changes every refresh at most.
CACHE_CONTROL = "private, max-age=60"


async def get_suggestions(request: Request) -> Suggestions:
    suggestions: Suggestions = request.app.state.suggestions
    return suggestions


SuggestionsDep = Annotated[Suggestions, Depends(get_suggestions)]


@router.get("/suggest", response_model=SuggestResponse, responses=SUGGEST_ERRORS)
async def suggest(
    query: Annotated[SuggestQuery, Query()],
    caller: ReadCaller,
    suggestions: SuggestionsDep,
    response: Response,
) -> SuggestResponse:
    """Completions of what a searcher typed: popular queries, tags, words of titles."""
    found = suggestions.complete(query.q, query.limit)
    response.headers["Cache-Control"] = CACHE_CONTROL
    return SuggestResponse(
        q=query.q, suggestions=[SuggestionItem(text=s.text, source=s.source) for s in found]
    )
