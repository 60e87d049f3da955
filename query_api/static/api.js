// Talking to the query API: the caller's key, JSON calls with the API's error messages,
// and thumbnails that need the key.

import { invalidRequestMessage } from "./messages.js";

const KEY_STORAGE = "photosearch.apiKey";
const keyInput = document.getElementById("api-key");

export function storedKey() {
  try {
    return localStorage.getItem(KEY_STORAGE) || "";
  } catch {
    return "";
  }
}

export function storeKey(value) {
  try {
    if (value) localStorage.setItem(KEY_STORAGE, value);
    else localStorage.removeItem(KEY_STORAGE);
  } catch {
    // Storage refused (private mode): the key still works for this page.
  }
}

function key() {
  return keyInput.value.trim();
}

// The tab's random session id: sent with each search and its events, so the click model can
// tell searchers apart. Random, per tab, forgotten with it: nothing about the visitor.
const SESSION_STORAGE = "photosearch.session";
let session = "";

export function sessionId() {
  if (session) return session;
  try {
    session = sessionStorage.getItem(SESSION_STORAGE) || "";
  } catch {
    session = "";
  }
  if (!/^[A-Za-z0-9_-]{16,64}$/.test(session)) {
    // getRandomValues, not randomUUID: a page served over plain HTTP has only the former.
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    session = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    try {
      sessionStorage.setItem(SESSION_STORAGE, session);
    } catch {
      // Storage refused (private mode): the id lasts as long as the page.
    }
  }
  return session;
}

// A photo id may hold slashes (a path in its source): each segment is encoded, the slashes kept,
// as the API's {photo_id:path} routes read them.
export function photoPath(id) {
  return id.split("/").map(encodeURIComponent).join("/");
}

// The JSON answer of an API call; an Error with a message for a person otherwise.
export async function call(url, init = {}) {
  const headers = new Headers(init.headers || {});
  headers.set("Accept", "application/json");
  if (key()) headers.set("X-API-Key", key());
  headers.set("X-Session-Id", sessionId());
  let response;
  try {
    response = await fetch(url, { ...init, headers });
  } catch {
    throw new Error("The search service cannot be reached.");
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    let message =
      (response.status === 422 && invalidRequestMessage(body)) ||
      (body && body.message) ||
      `The search failed (HTTP ${response.status}).`;
    const retry = response.headers.get("Retry-After");
    // 503: the service is busy or a dependency is down; 429: this caller's rate limit.
    if ((response.status === 503 || response.status === 429) && retry) {
      message += `${/[.!?]$/.test(message) ? "" : "."} Try again in ${retry} s.`;
    }
    throw Object.assign(new Error(message), { status: response.status, body });
  }
  if (!body || typeof body !== "object") throw new Error("The answer was not understood.");
  return body;
}

// One page of a search: the API's SearchResponse.
export async function searchPage(url, init = {}) {
  const body = await call(url, init);
  if (!Array.isArray(body.results)) throw new Error("The answer was not understood.");
  return body;
}

// Whether the API refused a request for a parameter it does not know (an older API: the page
// asks again without it).
export function refusesParameter(error, name) {
  const details = error && error.status === 422 && error.body && error.body.details;
  return (
    Array.isArray(details) &&
    details.some((detail) => Array.isArray(detail.loc) && detail.loc.includes(name))
  );
}

// A photo's title for a heading, or its id where the API cannot tell.
export async function titleOf(id) {
  try {
    const photo = await call(`v1/photos/${photoPath(id)}`);
    return (photo.metadata && photo.metadata.title) || id;
  } catch {
    return id;
  }
}

// With anonymous search off, thumbnails want the key too, which an <img> cannot send.
export function loadThumbnail(img, url) {
  if (!key()) {
    img.src = url;
    return;
  }
  fetch(url, { headers: { "X-API-Key": key() } })
    .then((response) => (response.ok ? response.blob() : Promise.reject(response.status)))
    .then((blob) => {
      const objectUrl = URL.createObjectURL(blob);
      const release = () => URL.revokeObjectURL(objectUrl);
      img.addEventListener("load", release, { once: true });
      img.addEventListener("error", release, { once: true });
      img.src = objectUrl;
    })
    .catch(() => img.classList.add("broken"));
}

// A model with random weights (no pretrained ones on this machine) ranks text at random:
// the notice says so before anyone trusts the results.
export async function checkModel(notice) {
  const headers = { Accept: "application/json" };
  if (key()) headers["X-API-Key"] = key();
  try {
    const response = await fetch("v1/model", { headers });
    if (!response.ok) return;
    const model = await response.json();
    notice.hidden = !model.random_weights;
    notice.textContent = model.random_weights
      ? `This demo's model (${model.arch}, version ${model.model_version}) has random ` +
        "weights: text search returns meaningless results. Searching by an image and " +
        "\u201cmore like this\u201d still work."
      : "";
  } catch {
    // The status line reports an unreachable service when a search is made.
  }
}
