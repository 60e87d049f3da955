// A photo's detail view: a modal dialog with a larger image, what the catalogue knows of it
// (title, photographer, licence, tags and automatic tags, colours, size), its near-duplicates
// and more like it. The focus stays inside while it is open; Escape closes it and the focus
// returns to the tile that opened it.

import { call, loadThumbnail, photoPath } from "./api.js";
import { swatch } from "./palette.js";
import { remember, scoreText, shownPhoto, thumbnail, titleOfPhoto } from "./results.js";

const $ = (id) => document.getElementById(id);
const dialog = $("detail");
const image = $("detail-image");
const info = $("detail-info");
const STRIP = 8; // photos in each strip
const FOCUSABLE = "a[href], button:not([disabled]), summary, [tabindex]:not([tabindex='-1'])";

let opener = null;
let sequence = 0; // the strips' answers for a photo no longer shown are dropped
let options = null;

function element(tag, className, text = "") {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text) made.textContent = text;
  return made;
}

function facts(rows) {
  const list = element("dl", "facts");
  for (const [term, value, testid] of rows) {
    if (value === null || value === undefined || value === "") continue;
    const dd = element("dd", "", String(value));
    if (testid) dd.dataset.testid = testid;
    list.append(element("dt", "", term), dd);
  }
  return list;
}

function words(heading, testid, values) {
  const section = element("section", "words");
  section.dataset.testid = testid;
  const list = element("ul", "word-list");
  for (const value of values) list.append(element("li", "word", value));
  section.append(element("h3", "", heading), list);
  return section;
}

function colours(list) {
  const section = element("section", "words");
  section.dataset.testid = "detail-colors";
  const items = element("ul", "word-list");
  for (const { name, share } of list) {
    const item = element("li", "word");
    item.append(swatch(name), `${name} ${Math.round(Number(share) * 100)}%`);
    items.append(item);
  }
  section.append(element("h3", "", "Colours"), items);
  return section;
}

function link(text, href, view, id, testid) {
  const made = element("a", "action", text);
  made.href = href;
  made.dataset.view = view;
  made.dataset.id = id;
  made.dataset.testid = testid;
  return made;
}

function developer(photo, rank) {
  const details = element("details", "developer");
  details.dataset.testid = "detail-developer";
  const score = typeof photo.score === "number" ? scoreText(photo.score) : null;
  details.append(
    element("summary", "", "For developers"),
    facts([
      ["Id", photo.id],
      ["Score", score, "result-score"],
      ["Rank", rank],
      ["Model version", photo.model_version],
      ["Indexed", photo.indexed_at],
    ]),
  );
  return details;
}

function describe(photo, rank) {
  const meta = photo.metadata || {};
  const attributes = photo.attributes || null;
  const size =
    attributes && attributes.width ? `${attributes.width} × ${attributes.height} px` : "";
  info.replaceChildren(
    facts([
      ["Photographer", meta.photographer, "detail-photographer"],
      ["Licence", meta.license, "detail-license"],
      ["Created", (meta.created_at || "").slice(0, 10)],
      ["Size", size, "detail-size"],
      ["Orientation", attributes && attributes.orientation, "detail-orientation"],
    ]),
  );
  if (meta.tags && meta.tags.length) info.append(words("Tags", "detail-tags", meta.tags));
  const auto = Array.isArray(photo.auto_tags) ? photo.auto_tags : [];
  if (auto.length) info.append(words("Automatic tags", "detail-auto-tags", auto));
  if (attributes && Array.isArray(attributes.colors) && attributes.colors.length) {
    info.append(colours(attributes.colors));
  }
  const actions = element("p", "detail-actions");
  const { similarHref, duplicatesHref } = options;
  actions.append(
    link("More like this", similarHref(photo.id), "similar", photo.id, "detail-similar"),
  );
  if (photo.duplicates) {
    const count = photo.duplicates.count;
    const text = `All ${count} similar shot${count === 1 ? "" : "s"}`;
    const href = duplicatesHref(photo.id);
    actions.append(link(text, href, "duplicates", photo.id, "detail-all-duplicates"));
  }
  info.append(actions, developer(photo, rank));
}

function stripItem(photo) {
  remember(photo);
  const title = titleOfPhoto(photo);
  const button = element("button", "strip-photo");
  button.type = "button";
  button.dataset.testid = "strip-photo";
  button.dataset.id = photo.id;
  button.setAttribute("aria-label", title);
  button.append(thumbnail(photo, title));
  const item = element("li");
  item.append(button);
  return item;
}

// Fills a strip from an API call; a failure or an empty answer says so in words.
async function fill(list, mine, load, empty) {
  list.replaceChildren(element("li", "strip-note", "Loading…"));
  let photos = [];
  let failed = false;
  try {
    photos = await load();
  } catch {
    failed = true;
  }
  if (mine !== sequence) return;
  if (photos.length) list.replaceChildren(...photos.map(stripItem));
  else list.replaceChildren(element("li", "strip-note", failed ? "Could not be loaded." : empty));
}

function show(photo, rank) {
  const mine = ++sequence;
  const title = titleOfPhoto(photo);
  $("detail-title").textContent = title;
  dialog.dataset.id = photo.id;
  image.alt = title;
  image.removeAttribute("src");
  loadThumbnail(image, photo.image_url || photo.thumbnail_url);
  describe(photo, rank);
  const path = photoPath(photo.id);
  fill($("detail-dups"), mine, async () => {
    const body = await call(`v1/photos/${path}/duplicates?limit=${STRIP}`);
    return Array.isArray(body.photos) ? body.photos : [];
  }, "No other shot of this scene.");
  fill($("detail-similar-list"), mine, async () => {
    const body = await call(`v1/photos/${path}/similar?${options.similarQuery(photo.id, STRIP)}`);
    return Array.isArray(body.results) ? body.results : [];
  }, "Nothing else like it.");
}

// Opens the detail view of `photo`; `from` gets the focus back when it closes. `links`:
// similarHref(id), duplicatesHref(id) (the page URLs of those views) and similarQuery(id,
// limit) (the API query of the "more like this" strip).
export function openDetail(photo, from, links, rank = null) {
  opener = from;
  options = links;
  show(photo, rank);
  if (!dialog.open) dialog.showModal();
  $("detail-close").focus();
}

export function closeDetail() {
  if (dialog.open) dialog.close();
}

dialog.addEventListener("close", () => {
  sequence += 1;
  if (opener && opener.isConnected) opener.focus();
  opener = null;
});

$("detail-close").addEventListener("click", closeDetail);

// A click on the backdrop (the dialog's own box, outside its content) closes it too.
dialog.addEventListener("click", (event) => {
  if (event.target === dialog) closeDetail();
  const strip = event.target.closest("button[data-testid=strip-photo]");
  if (strip) {
    show(shownPhoto(strip.dataset.id), null);
    $("detail-close").focus(); // the pressed photo's strip was emptied: the focus stays inside
  }
});

// Tab and Shift+Tab go round the dialog's own controls.
dialog.addEventListener("keydown", (event) => {
  if (event.key !== "Tab") return;
  const all = [...dialog.querySelectorAll(FOCUSABLE)].filter((e) => e.getClientRects().length);
  if (!all.length) return;
  const first = all[0];
  const last = all[all.length - 1];
  if (event.shiftKey && document.activeElement === first) {
    event.preventDefault();
    last.focus();
  } else if (!event.shiftKey && document.activeElement === last) {
    event.preventDefault();
    first.focus();
  }
});
