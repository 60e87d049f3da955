// PhotoSearch's page: text, image, "more like this", near-duplicate and recommend searches
// over the query API. Each search is a URL of the page (state.js): opening one runs it, and
// Back and Forward walk the searches made.

import { call, checkModel, photoPath, searchPage, storeKey, storedKey, titleOf } from "./api.js";
import { recordEvent } from "./feedback.js";
import { card, knownTitle, MAX_MARKS, marked, renderMarks, setMarks, toggleMark } from "./results.js";
import {
  apiParams,
  fillForm,
  formOptions,
  formTextView,
  lastOffset,
  pageParams,
  viewOf,
} from "./state.js";

const $ = (id) => document.getElementById(id);
const form = $("search-form");
const input = $("q");
const imageInput = $("image");
const imageUrl = $("image-url");
const keyInput = $("api-key");
const status = $("status");
const heading = $("results-heading");
const grid = $("results");
const more = $("more");

// A page URL's offset loads its pages one by one; past this many it stops (a hand-made URL).
const MAX_PAGES = 10;

// The search on screen: its page URL's parameters, where its pages come from, how far it got.
let current = null;
let sequence = 0; // answers to an older request than the latest are dropped
// Uploaded images by their history entry: a file cannot live in a URL, only in this page.
const uploads = new Map();
let uploadCount = 0;

// The hrefs of a card's links, with the form's filters as they are when it is shown.
const links = {
  similar: (id) => `?${pageParams({ kind: "similar", id })}`,
  duplicates: (id) => `?${pageParams({ kind: "duplicates", id })}`,
};

function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

function titled(id, named) {
  return named(knownTitle(id) || id);
}

// How to fetch a view's pages, and what to call it.
function sourceOf(view, params) {
  const query = (offset) => apiParams(params, offset);
  switch (view.kind) {
    case "text":
      return {
        heading: `Results for “${view.q}”`,
        text: true,
        page: (offset) => searchPage(`v1/search?${query(offset)}`),
      };
    case "similar": {
      const named = (title) => `More like ${title}`;
      return {
        heading: titled(view.id, named),
        named,
        page: (offset) =>
          searchPage(`v1/photos/${photoPath(view.id)}/similar?${query(offset)}`),
      };
    }
    case "duplicates": {
      const named = (title) => `Similar shots of ${title}`;
      return {
        heading: titled(view.id, named),
        named,
        noun: "similar shot",
        page: async () => {
          const body = await call(`v1/photos/${photoPath(view.id)}/duplicates`);
          if (!Array.isArray(body.photos)) throw new Error("The answer was not understood.");
          return { results: body.photos, next_offset: null };
        },
      };
    }
    case "recommend": {
      const unliked = view.unlike.length ? `, not like ${view.unlike.length}` : "";
      return {
        heading: `More like ${plural(view.like.length, "liked photo")}${unliked}`,
        page: (offset) => searchPage(`v1/search/recommend?${query(offset)}`),
      };
    }
    case "image_url":
      return {
        heading: `Photos like ${view.url}`,
        page: (offset) =>
          searchPage(`v1/search/image?${query(offset)}`, {
            method: "POST",
            headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ url: view.url }),
          }),
      };
    case "upload":
      return {
        heading: `Photos like ${view.file.name}`,
        page: (offset) => {
          const data = new FormData();
          data.append("file", view.file, view.file.name);
          return searchPage(`v1/search/image?${query(offset)}`, { method: "POST", body: data });
        },
      };
    default:
      throw new Error(`unknown view ${view.kind}`);
  }
}

function describe(body) {
  const noun = current.source.noun || "result";
  const parts = [plural(current.shown, noun)];
  if (body.next_offset !== null) parts[0] += ", more available";
  if (body.mode) parts.push(`${body.mode} search`);
  if (body.model_version !== undefined) parts.push(`model version ${body.model_version}`);
  // Told to an operator's key only (null otherwise): whether the cache answered.
  if (current.source.text && body.cached !== null && body.cached !== undefined) {
    parts.push(body.cached ? "query embedding cached" : "query embedding not cached");
  }
  if (typeof body.took_ms === "number") parts.push(`${Math.round(body.took_ms)} ms`);
  return parts.join(" · ");
}

function setHeading(text) {
  heading.textContent = text;
  document.title = `${text} · PhotoSearch`;
}

function showError(message) {
  status.classList.add("error");
  status.textContent = message;
}

// Loads the pages of the search on screen from offset `from` through the page at `through`.
async function load(mine, from, through, focus) {
  grid.setAttribute("aria-busy", "true");
  status.classList.remove("error");
  status.textContent = "Searching…";
  try {
    let offset = from;
    let pages = 0;
    let body;
    do {
      body = await current.source.page(offset);
      if (mine !== sequence) return;
      // A search's answer has an id and an offset; a duplicates listing has neither.
      const shownBy = (i) =>
        body.search_id ? { searchId: body.search_id, rank: body.offset + i + 1 } : null;
      grid.append(...body.results.map((result, i) => card(result, links, shownBy(i))));
      current.shown += body.results.length;
      current.loaded = offset;
      offset = body.next_offset;
      pages += 1;
    } while (offset !== null && offset <= through && pages < MAX_PAGES);
    current.nextOffset = offset;
    more.hidden = offset === null;
    status.textContent = describe(body);
    if (focus) heading.focus();
  } catch (error) {
    if (mine !== sequence) return;
    showError(error.message);
  } finally {
    if (mine === sequence) grid.removeAttribute("aria-busy");
  }
}

// Shows a page URL's search (or an uploaded image's), replacing what is on screen.
function run(params, { upload = null, focus = false } = {}) {
  const mine = ++sequence;
  grid.dataset.requests = String(sequence);
  grid.replaceChildren();
  more.hidden = true;
  status.classList.remove("error");
  status.textContent = "";
  const view = upload ? { kind: "upload", file: upload } : viewOf(params);
  if (!view) {
    current = null;
    heading.hidden = true;
    document.title = "PhotoSearch";
    return;
  }
  current = { params, source: sourceOf(view, params), shown: 0, nextOffset: null, upload };
  setHeading(current.source.heading);
  heading.hidden = false;
  if (current.source.named && !knownTitle(view.id)) {
    // Opened from a URL: the photo's title comes from the API.
    const { named } = current.source;
    titleOf(view.id).then((title) => {
      if (mine === sequence) setHeading(named(title));
    });
  }
  load(mine, 0, upload ? 0 : lastOffset(params), focus);
}

// A new search: a new history entry, so Back returns to the one before.
function navigate(params, { upload = null, focus = false } = {}) {
  const url = `?${params}`;
  let state = null;
  if (upload) {
    uploadCount += 1;
    uploads.set(uploadCount, upload);
    state = { upload: uploadCount };
  }
  // The same search again (a retry) keeps one entry: Back should not step through repeats.
  const same = !upload && !history.state && url === (location.search || "?");
  if (same) history.replaceState(state, "", url);
  else history.pushState(state, "", url);
  run(params, { upload, focus });
}

// Shows the search of the history entry (or URL) the page is at: on load, Back and Forward.
function restore() {
  const params = new URLSearchParams(location.search);
  fillForm(params);
  const view = viewOf(params);
  if (view && view.kind === "recommend") setMarks(view.like, view.unlike);
  const entry = history.state && history.state.upload;
  if (!entry) {
    run(params);
    return;
  }
  const file = uploads.get(entry);
  if (file) {
    run(params, { upload: file });
  } else {
    run(new URLSearchParams());
    showError("Choose the image again: an uploaded image is not kept in the page's address.");
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const view = formTextView();
  if (view.q) {
    navigate(pageParams(view));
  } else {
    showError("Type what the photo shows, or choose an image.");
    input.focus();
  }
});

imageInput.addEventListener("change", () => {
  const [file] = imageInput.files;
  if (file) navigate(formOptions(), { upload: file });
});

function searchImageUrl() {
  const url = imageUrl.value.trim();
  if (url) {
    navigate(pageParams({ kind: "image_url", url }));
  } else {
    showError("Paste the address of an image.");
    imageUrl.focus();
  }
}

$("image-url-button").addEventListener("click", searchImageUrl);
imageUrl.addEventListener("keydown", (event) => {
  if (event.key !== "Enter") return;
  event.preventDefault(); // not the text search's submit
  searchImageUrl();
});

// A card's links: a plain click shows the view here; a modified one opens a tab as links do.
grid.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-view]");
  if (link && link.dataset.view === "similar") recordEvent(link.closest("li"), "opened");
  if (link) {
    if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) {
      return;
    }
    event.preventDefault();
    navigate(pageParams({ kind: link.dataset.view, id: link.dataset.id }), { focus: true });
    return;
  }
  const button = event.target.closest("button[data-mark]");
  if (button && !toggleMark(button.closest("li").dataset.id, button.dataset.mark)) {
    showError(`At most ${MAX_MARKS} photos can be marked each way.`);
  }
});

$("recommend").addEventListener("click", () => {
  const view = { kind: "recommend", like: marked("like"), unlike: marked("unlike") };
  navigate(pageParams(view), { focus: true });
});
$("clear-marks").addEventListener("click", () => setMarks([], []));

// "More results" adds a page; the URL then names it, in place: Back leaves the search rather
// than stepping back through its pages, and a shared URL shows all the pages its sender saw.
more.addEventListener("click", async () => {
  if (!current || current.nextOffset === null) return;
  const mine = ++sequence;
  grid.dataset.requests = String(sequence);
  const offset = current.nextOffset;
  await load(mine, offset, offset, false);
  if (mine !== sequence || current.loaded !== offset || current.upload) return;
  current.params.set("offset", String(offset));
  history.replaceState(history.state, "", `?${current.params}`);
});

window.addEventListener("popstate", restore);

$("diversity").addEventListener("input", () => {
  $("diversity-value").value = $("diversity").value;
});

keyInput.value = storedKey();
keyInput.addEventListener("change", () => {
  storeKey(keyInput.value.trim());
  checkModel($("model-notice"));
});
checkModel($("model-notice"));
renderMarks();
restore();

// "/" anywhere but in a field moves to the search box.
document.addEventListener("keydown", (event) => {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  if (
    target instanceof HTMLElement &&
    (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))
  ) {
    return;
  }
  event.preventDefault();
  input.focus();
  input.select();
});
