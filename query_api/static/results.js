// The result grid: a card per photo, with its "more like this" link, its like / not like
// marks and its near-duplicates; and the bar that searches by the marks.

import { loadThumbnail } from "./api.js";

const $ = (id) => document.getElementById(id);
// The recommend API takes at most this many liked, and as many not-liked, photos.
export const MAX_MARKS = 20;

// Photos the visitor marked, id -> "like" | "unlike"; kept across searches until cleared.
export const marks = new Map();
// Titles of the photos shown, for the headings of the views that name one.
const titles = new Map();
// The photos shown, by id, as the API gave them: what their detail view shows.
const shownPhotos = new Map();

export function shownPhoto(id) {
  return shownPhotos.get(id);
}

// Keeps a photo the page shows (a tile, or one in a detail view's strips) for its detail view.
export function remember(photo) {
  titles.set(photo.id, titleOfPhoto(photo));
  shownPhotos.set(photo.id, photo);
}

export function knownTitle(id) {
  return titles.get(id);
}

export function marked(kind) {
  return [...marks].filter(([, mark]) => mark === kind).map(([id]) => id);
}

// Marks from a page URL's recommend view: what it searched by is what is marked.
export function setMarks(like, unlike) {
  marks.clear();
  for (const id of like) marks.set(id, "like");
  for (const id of unlike) marks.set(id, "unlike");
  renderMarks();
}

// Marks a photo, or unmarks it when it already has that mark. False past the API's limit.
export function toggleMark(id, kind) {
  if (marks.get(id) === kind) {
    marks.delete(id);
  } else {
    if (marked(kind).length >= MAX_MARKS) return false;
    marks.set(id, kind);
  }
  renderMarks();
  return true;
}

// The mark buttons of every card and the marks bar, as the marks are now.
export function renderMarks() {
  for (const button of $("results").querySelectorAll("button[data-mark]")) {
    const mark = marks.get(button.closest("li").dataset.id);
    button.setAttribute("aria-pressed", String(mark === button.dataset.mark));
  }
  const liked = marked("like").length;
  const unliked = marked("unlike").length;
  $("marks").hidden = liked + unliked === 0;
  $("marks-summary").textContent =
    `${liked} liked · ${unliked} not liked` + (liked ? "" : ": like a photo to search by them");
  $("recommend").disabled = liked === 0;
}

export function scoreText(score) {
  // Three places: a hybrid search's rank fusion scores are all near 1/60. A score just below
  // zero would read "-0.000", which looks like a bug to a visitor.
  return score.toFixed(3).replace(/^-(0\.000)$/, "$1");
}

// A photo's width / height from its attributes; 4:3 for one indexed before they existed.
export function aspectOf(photo) {
  const attributes = photo.attributes;
  if (attributes && attributes.width > 0 && attributes.height > 0) {
    return attributes.width / attributes.height;
  }
  if (attributes && attributes.aspect_ratio > 0) return attributes.aspect_ratio;
  return 4 / 3;
}

export function titleOfPhoto(photo) {
  return (photo.metadata && photo.metadata.title) || photo.id;
}

function span(className, testid, text) {
  const element = document.createElement("span");
  element.className = className;
  element.dataset.testid = testid;
  element.textContent = text;
  return element;
}

// The marks' icons (a heart; a circle struck through): small enough for a narrow tile.
const ICONS = {
  like: "M12 21 10.6 19.7C5.4 15 2 11.9 2 8.1 2 5 4.4 2.6 7.5 2.6c1.7 0 3.4.8 4.5 2.1 1.1-1.3 2.8-2.1 4.5-2.1C19.6 2.6 22 5 22 8.1c0 3.8-3.4 6.9-8.6 11.6L12 21Z",
  unlike: "M12 2a10 10 0 1 0 0 20 10 10 0 0 0 0-20Zm0 2a8 8 0 0 1 6.3 12.9L7.1 5.7A8 8 0 0 1 12 4ZM4 12a8 8 0 0 1 1.7-4.9l11.2 11.2A8 8 0 0 1 4 12Z",
};

function icon(kind) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", ICONS[kind]);
  path.setAttribute("fill", "currentColor");
  svg.append(path);
  return svg;
}

function markButton(id, title, kind, label) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "mark";
  button.dataset.mark = kind;
  button.dataset.testid = kind;
  button.title = label;
  button.append(icon(kind));
  button.setAttribute("aria-label", `${label}: ${title}`);
  button.setAttribute("aria-pressed", String(marks.get(id) === kind));
  return button;
}

// A photo's thumbnail at its own aspect ratio: the justified grid sizes a tile by it (the
// ratio is a CSS variable, set through the CSSOM: the page's policy refuses style attributes).
export function thumbnail(photo, title) {
  const img = document.createElement("img");
  img.alt = title;
  img.decoding = "async";
  loadThumbnail(img, photo.thumbnail_url);
  return img;
}

// One result's tile: a button that opens its detail view (app.js), its like / not like marks
// and its near-duplicates' link (`links` gives the href; the page follows it itself on a plain
// click). `shownBy`: the search that showed it and its rank there, for the events on it
// (feedback.js). Scores stay out of sight: the detail view's developer section tells them.
export function card(result, links, shownBy = null) {
  const title = titleOfPhoto(result);
  remember(result);
  const item = document.createElement("li");
  item.className = "tile";
  item.dataset.id = result.id;
  item.style.setProperty("--ar", aspectOf(result).toFixed(4));
  if (shownBy) {
    item.dataset.searchId = shownBy.searchId;
    item.dataset.rank = String(shownBy.rank);
  }

  const open = document.createElement("button");
  open.type = "button";
  open.className = "open";
  open.dataset.testid = "result";
  open.dataset.id = result.id;
  open.setAttribute("aria-haspopup", "dialog");
  // A near-duplicate group's listing has no scores: it is not a ranking.
  if (typeof result.score === "number") open.dataset.score = scoreText(result.score);
  const caption = span("caption", "result-caption", "");
  caption.append(span("title", "result-title", title));
  const photographer = result.metadata && result.metadata.photographer;
  if (photographer) caption.append(span("by", "result-by", `by ${photographer}`));
  open.append(thumbnail(result, title), caption);
  open.setAttribute("aria-label", photographer ? `${title}, by ${photographer}` : title);

  const actions = document.createElement("div");
  actions.className = "actions";
  actions.append(
    markButton(result.id, title, "like", "Like"),
    markButton(result.id, title, "unlike", "Not like"),
  );
  item.append(open, actions);
  if (result.duplicates) {
    const count = result.duplicates.count;
    const dups = document.createElement("a");
    dups.className = "duplicates";
    dups.href = links.duplicates(result.id);
    dups.dataset.testid = "duplicates";
    dups.dataset.view = "duplicates";
    dups.dataset.id = result.id;
    dups.textContent = `+${count} similar shot${count === 1 ? "" : "s"}`;
    dups.setAttribute("aria-label", `${dups.textContent} of ${title}`);
    item.append(dups);
  }
  return item;
}
