// The page's URL is its search: what a URL asks for, the form that shows it, the API query.
//
// A page URL holds one view (q=, similar=, duplicates=, like=/unlike=, image_url=), the
// filters and options of the form, and `offset`: the offset of the last page the visitor
// loaded with "More results", so a shared URL shows as many results as its sender saw.
// Defaults are left out, to keep URLs short.

const $ = (id) => document.getElementById(id);

export const DEFAULT_LIMIT = "20";
const DEFAULT_MODE = "hybrid";
const DEFAULT_SORT = "relevance";
const DATE = /^\d{4}-\d{2}-\d{2}$/;
// Filters and options every search takes, in the order a page URL lists them.
const FILTERS = [
  "tags_any",
  "tags_all",
  "auto_tags_all",
  "color",
  "orientation",
  "photographer",
  "license",
  "created_from",
  "created_to",
  "score_threshold",
  "limit",
];
const OPTIONS = ["collapse", "diversity", "sort"];
const COMMON = [...FILTERS, ...OPTIONS];
// The filters the "More filters" section alone shows (the others are chips and facets).
const MORE_FILTERS = ["tags_any", "created_from", "created_to", "score_threshold", "limit"];
// The facet fields the page asks counts of, and the filter that choosing a value sets.
export const FACETS = {
  tags: "tags_all",
  auto_tags: "auto_tags_all",
  color: "color",
  orientation: "orientation",
  license: "license",
  photographer: "photographer",
};
// Filters that hold a list (every value must hold); the others hold one value.
const LISTED = new Set(["tags_any", "tags_all", "auto_tags_all"]);

function split(text) {
  return text
    .split(",")
    .map((part) => part.trim())
    .filter(Boolean);
}

// What a page URL's query string asks to show: null for none (the bare page).
export function viewOf(params) {
  if (params.has("similar")) return { kind: "similar", id: params.get("similar") };
  if (params.has("duplicates")) return { kind: "duplicates", id: params.get("duplicates") };
  if (params.has("like") || params.has("unlike")) {
    return { kind: "recommend", like: params.getAll("like"), unlike: params.getAll("unlike") };
  }
  if (params.has("image_url")) return { kind: "image_url", url: params.get("image_url") };
  const q = (params.get("q") || "").trim();
  if (q) return { kind: "text", q, not: params.getAll("not") };
  return null;
}

// The form's filters and options, as a page URL holds them.
export function formOptions() {
  const params = new URLSearchParams();
  for (const tag of split($("tags-any").value)) params.append("tags_any", tag);
  for (const tag of split($("tags-all").value)) params.append("tags_all", tag);
  for (const tag of split($("auto-tags-all").value)) params.append("auto_tags_all", tag);
  for (const name of ["color", "orientation", "photographer", "license"]) {
    const value = $(name).value.trim();
    if (value) params.set(name, value);
  }
  if ($("created-from").value) params.set("created_from", $("created-from").value);
  if ($("created-to").value) params.set("created_to", $("created-to").value);
  if ($("score-threshold").value !== "") params.set("score_threshold", $("score-threshold").value);
  if ($("limit").value !== DEFAULT_LIMIT) params.set("limit", $("limit").value);
  if (!$("collapse").checked) params.set("collapse", "false");
  if (Number($("diversity").value) > 0) params.set("diversity", $("diversity").value);
  if ($("sort").value !== DEFAULT_SORT) params.set("sort", $("sort").value);
  return params;
}

// A page URL's query string: a view's own parameters, then the form's options.
export function pageParams(view, options = formOptions()) {
  const params = new URLSearchParams();
  if (view.kind === "text") {
    params.set("q", view.q);
    const mode = $("mode").value;
    if (mode !== DEFAULT_MODE) params.set("mode", mode);
    for (const text of view.not) params.append("not", text);
  } else if (view.kind === "similar" || view.kind === "duplicates") {
    params.set(view.kind, view.id);
  } else if (view.kind === "recommend") {
    for (const id of view.like) params.append("like", id);
    for (const id of view.unlike) params.append("unlike", id);
  } else if (view.kind === "image_url") {
    params.set("image_url", view.url);
  }
  // A photo's near-duplicates are the same whatever the filters: its URL is just the photo.
  if (view.kind !== "duplicates") {
    for (const [name, value] of options) params.append(name, value);
  }
  return params;
}

// The text search the form asks for: its query and "not" descriptions.
export function formTextView() {
  return { kind: "text", q: $("q").value.trim(), not: split($("not").value) };
}

function fill(id, value) {
  $(id).value = value;
}

// A select shows a value from a hand-made URL too (a page size, a colour as hex).
function choose(id, value) {
  const select = $(id);
  if (![...select.options].some((option) => option.value === value)) {
    select.append(new Option(value));
  }
  select.value = value;
}

// Shows a page URL's search in the form, opening the sections that hold anything set.
export function fillForm(params) {
  const view = viewOf(params);
  if (view && view.kind === "duplicates") return; // it has no filters to show
  fill("q", params.get("q") || "");
  fill("not", params.getAll("not").join(", "));
  fill("mode", params.get("mode") || DEFAULT_MODE);
  fill("image-url", params.get("image_url") || "");
  fill("tags-any", params.getAll("tags_any").join(", "));
  fill("tags-all", params.getAll("tags_all").join(", "));
  fill("auto-tags-all", params.getAll("auto_tags_all").join(", "));
  choose("color", params.get("color") || "");
  choose("orientation", params.get("orientation") || "");
  fill("photographer", params.get("photographer") || "");
  fill("license", params.get("license") || "");
  // A date input holds a day: a time in a hand-made URL is shown as its day.
  fill("created-from", (params.get("created_from") || "").slice(0, 10));
  fill("created-to", (params.get("created_to") || "").slice(0, 10));
  fill("score-threshold", params.get("score_threshold") || "");
  $("collapse").checked = params.get("collapse") !== "false";
  fill("diversity", params.get("diversity") || "0");
  $("diversity-value").value = $("diversity").value;
  fill("sort", params.get("sort") || DEFAULT_SORT);
  choose("limit", params.get("limit") || DEFAULT_LIMIT);

  if (MORE_FILTERS.some((name) => params.has(name))) $("filters").open = true;
  if (["mode", "not", ...OPTIONS].some((name) => params.has(name))) $("options").open = true;
}

// The API's query string for one page of a page URL's search (not its view's own id).
export function apiParams(params, offset) {
  const api = new URLSearchParams();
  const view = viewOf(params);
  if (view && view.kind === "text") {
    api.set("q", view.q);
    if (params.has("mode")) api.set("mode", params.get("mode"));
    for (const text of view.not) api.append("not", text);
  } else if (view && view.kind === "recommend") {
    for (const id of view.like) api.append("positive", id);
    for (const id of view.unlike) api.append("negative", id);
  }
  for (const name of COMMON) {
    for (let value of params.getAll(name)) {
      // Whole days: from the start of the first to the end of the last.
      if (name === "created_from" && DATE.test(value)) value += "T00:00:00";
      if (name === "created_to" && DATE.test(value)) value += "T23:59:59";
      api.append(name, value);
    }
  }
  if (!api.has("limit")) api.set("limit", DEFAULT_LIMIT);
  if (offset) api.set("offset", String(offset));
  return api;
}

// The offset of the last page a page URL shows (0: the first page only).
export function lastOffset(params) {
  const offset = Number.parseInt(params.get("offset") || "0", 10);
  return Number.isFinite(offset) && offset > 0 ? offset : 0;
}

// A page URL's search with one filter value set (on) or taken off: a new search, from its
// first page. A one-value filter's new value replaces the old one.
export function refined(params, name, value, on) {
  const next = new URLSearchParams();
  for (const [key, old] of params) {
    if (key === "offset") continue;
    if (key === name && (old === value || (on && !LISTED.has(name)))) continue;
    next.append(key, old);
  }
  if (on) next.append(name, value);
  return next;
}

// The filters a page URL sets, as chips name them: [{name, value}], in the URL's order.
export function activeFilters(params) {
  return [...params]
    .filter(([name]) => FILTERS.includes(name) && name !== "limit")
    .map(([name, value]) => ({ name, value }));
}

// Whether a page URL's search holds this filter value (a facet value shown as chosen).
export function holds(params, name, value) {
  return params.getAll(name).includes(value);
}
