// PhotoSearch's page: text, image, "more like this", near-duplicate and recommend searches
// over the query API, a filter panel with counts, and a photo's detail view. Each search is
// a URL of the page (state.js): opening one runs it, and Back and Forward walk the searches
// made.

import { checkModel, storeKey, storedKey, titleOf } from "./api.js";
import { closeDetail, openDetail } from "./detail.js";
import { changeOf, renderChips, renderFacets } from "./facets.js";
import { recordEvent } from "./feedback.js";
import { PALETTE } from "./palette.js";
import { closeOnOutsideClick, disclosure } from "./panels.js";
import {
  card,
  knownTitle,
  MAX_MARKS,
  marked,
  renderMarks,
  setMarks,
  shownPhoto,
  toggleMark,
} from "./results.js";
import {
  apiParams,
  fillForm,
  formOptions,
  formTextView,
  lastOffset,
  pageParams,
  refined,
  viewOf,
} from "./state.js";
import { attachSuggestions } from "./suggest.js";
import { plural, sourceOf } from "./views.js";

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
const facets = $("facets");
const chips = $("chips");

// A page URL's offset loads its pages one by one; past this many it stops (a hand-made URL).
const MAX_PAGES = 10;

// The search on screen: its page URL's parameters, where its pages come from, how far it got.
let current = null;
let sequence = 0; // answers to an older request than the latest are dropped
// Uploaded images by their history entry: a file cannot live in a URL, only in this page.
const uploads = new Map();
let uploadCount = 0;

// The page URLs of a photo's views, with the form's filters as they are when it is shown.
const links = {
  similar: (id) => `?${pageParams({ kind: "similar", id })}`,
  duplicates: (id) => `?${pageParams({ kind: "duplicates", id })}`,
};
// What the detail view links to, and its "more like this" strip's API query.
const detailLinks = {
  similarHref: links.similar,
  duplicatesHref: links.duplicates,
  similarQuery: (id, limit) => {
    const query = apiParams(pageParams({ kind: "similar", id }), 0);
    query.set("limit", String(limit));
    return query;
  },
};

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

// The filters a search holds, as chips, and their number on the phone's Filters button.
function showFilters(params) {
  const count = renderChips(chips, params);
  $("refine-count").hidden = count === 0;
  $("refine-count").textContent = count ? String(count) : "";
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
      if (offset === 0) renderFacets(facets, $("facets-note"), body.facets, current.params);
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
  renderFacets(facets, $("facets-note"), null, params);
  more.hidden = true;
  status.classList.remove("error");
  status.textContent = "";
  const view = upload ? { kind: "upload", file: upload } : viewOf(params);
  showFilters(view && view.kind !== "duplicates" ? params : null);
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
  suggestions.cancel();
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
  closeDetail();
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

// A facet value chosen or a chip removed: the search on screen with that filter changed.
function refine(changes) {
  if (!current) return;
  let params = current.params;
  for (const { name, value, on } of changes) params = refined(params, name, value, on);
  fillForm(params);
  navigate(params, { upload: current.upload });
}

const suggestions = attachSuggestions(input, $("suggestions"), (text) => {
  input.value = text;
  form.requestSubmit();
});

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

const photoPanel = $("photo-panel");
const setPhotoPanel = disclosure($("by-photo"), photoPanel, (panel, open) => {
  panel.hidden = !open;
  if (open) imageInput.focus();
});
closeOnOutsideClick($("by-photo"), photoPanel, setPhotoPanel);

const setRefine = disclosure($("open-refine"), $("refine"), (panel, open) => {
  panel.classList.toggle("open", open);
});

imageInput.addEventListener("change", () => {
  const [file] = imageInput.files;
  if (!file) return;
  setPhotoPanel(false);
  navigate(formOptions(), { upload: file });
});

function searchImageUrl() {
  const url = imageUrl.value.trim();
  if (url) {
    setPhotoPanel(false);
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

// A link to a view: a plain click shows it here; a modified one opens a tab as links do.
function followed(event) {
  const link = event.target.closest("a[data-view]");
  if (!link) return false;
  if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) {
    return true;
  }
  event.preventDefault();
  closeDetail();
  navigate(pageParams({ kind: link.dataset.view, id: link.dataset.id }), { focus: true });
  return true;
}

grid.addEventListener("click", (event) => {
  if (followed(event)) return;
  const open = event.target.closest("button[data-testid=result]");
  if (open) {
    const tile = open.closest("li");
    recordEvent(tile, "opened");
    const rank = tile.dataset.rank ? Number(tile.dataset.rank) : null;
    openDetail(shownPhoto(open.dataset.id), open, detailLinks, rank);
    return;
  }
  const button = event.target.closest("button[data-mark]");
  if (button && !toggleMark(button.closest("li").dataset.id, button.dataset.mark)) {
    showError(`At most ${MAX_MARKS} photos can be marked each way.`);
  }
});
$("detail").addEventListener("click", followed);

for (const panel of [facets, chips]) {
  panel.addEventListener("click", (event) => {
    const changes = current && changeOf(event.target, current.params);
    if (changes && changes.length) refine(changes);
  });
}

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

for (const name of PALETTE) $("color").append(new Option(name, name));
keyInput.value = storedKey();
keyInput.addEventListener("change", () => {
  storeKey(keyInput.value.trim());
  checkModel($("model-notice"));
});
checkModel($("model-notice"));
renderMarks();
setRefine(false);
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
