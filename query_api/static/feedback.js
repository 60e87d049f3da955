// What the visitor did with a search's results, sent to POST /v1/events: a result opened
// (its "more like this" view, here or in a new tab). Skips are not sent: the server's click
// model counts the results shown above an opened one as skipped (the cascade assumption).

import { call, sessionId } from "./api.js";

let pending = [];

async function flush() {
  const events = pending;
  pending = [];
  if (!events.length) return;
  try {
    await call("v1/events", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ session: sessionId(), events }),
      keepalive: true, // still sent when the click leaves the page
    });
  } catch {
    // Feedback is best effort: a lost event never disturbs the search.
  }
}

// Records an action on a result card (its data-search-id and data-rank, set by results.js);
// events of one moment go in one request.
export function recordEvent(cardElement, action) {
  const { searchId, rank, id } = cardElement.dataset;
  if (!searchId || !rank) return; // a listing, not a search: nothing to tell
  pending.push({ search_id: searchId, photo_id: id, rank: Number(rank), action });
  if (pending.length === 1) queueMicrotask(flush);
}
