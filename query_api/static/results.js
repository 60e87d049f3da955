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

function scoreText(score) {
  // Three places: a hybrid search's rank fusion scores are all near 1/60. A score just below
  // zero would read "-0.000", which looks like a bug to a visitor.
  return score.toFixed(3).replace(/^-(0\.000)$/, "$1");
}

function span(className, testid, text) {
  const element = document.createElement("span");
  element.className = className;
  element.dataset.testid = testid;
  element.textContent = text;
  return element;
}

function markButton(id, title, kind, label) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "mark";
  button.dataset.mark = kind;
  button.dataset.testid = kind;
  button.textContent = label;
  button.setAttribute("aria-label", `${label}: ${title}`);
  button.setAttribute("aria-pressed", String(marks.get(id) === kind));
  return button;
}

// One result's card. `links` gives the hrefs of its "more like this" and near-duplicates
// views; the page follows them itself on a plain click (app.js), a new tab opens them anew.
// `shownBy`: the search that showed it and its rank there, for the events on it (feedback.js).
export function card(result, links, shownBy = null) {
  const title = (result.metadata && result.metadata.title) || result.id;
  titles.set(result.id, title);
  const item = document.createElement("li");
  item.className = "card";
  item.dataset.id = result.id;
  if (shownBy) {
    item.dataset.searchId = shownBy.searchId;
    item.dataset.rank = String(shownBy.rank);
  }

  const open = document.createElement("a");
  open.className = "open";
  open.href = links.similar(result.id);
  open.dataset.testid = "result";
  open.dataset.id = result.id;
  open.dataset.view = "similar";
  const img = document.createElement("img");
  img.alt = title;
  img.decoding = "async";
  loadThumbnail(img, result.thumbnail_url);
  open.append(img, span("title", "result-title", title));
  // A near-duplicate group's listing has no scores: it is not a ranking.
  if (typeof result.score === "number") {
    const score = scoreText(result.score);
    open.dataset.score = score;
    open.append(span("score", "result-score", score));
    open.setAttribute("aria-label", `${title}, score ${score}: show more like this`);
  } else {
    open.setAttribute("aria-label", `${title}: show more like this`);
  }
  open.append(span("hint", "result-hint", "More like this"));

  const actions = document.createElement("div");
  actions.className = "actions";
  actions.append(
    markButton(result.id, title, "like", "Like"),
    markButton(result.id, title, "unlike", "Not like"),
  );
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
    actions.append(dups);
  }
  item.append(open, actions);
  return item;
}
