// The filter panel: the search answer's facet counts, a group of values per field, and the
// chips of the filters a search holds. Choosing a value, or removing a chip, refines the
// search through `refine` (app.js): a new page URL, so Back undoes it.

import { swatch } from "./palette.js";
import { activeFilters, FACETS, holds } from "./state.js";

const FIELD_LABELS = {
  tags: "Tags",
  auto_tags: "Automatic tags",
  color: "Colour",
  orientation: "Orientation",
  license: "Licence",
  photographer: "Photographer",
};
const FILTER_LABELS = {
  tags_any: "Any tag",
  tags_all: "Tag",
  auto_tags_all: "Automatic tag",
  color: "Colour",
  orientation: "Orientation",
  license: "Licence",
  photographer: "Photographer",
  created_from: "From",
  created_to: "To",
  score_threshold: "Minimum similarity",
};

function element(tag, className, text = "") {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text) made.textContent = text;
  return made;
}

function hidden(text) {
  return element("span", "visually-hidden", text);
}

function valueButton(field, value, count, chosen) {
  const button = element("button", "facet-value");
  button.type = "button";
  button.dataset.testid = "facet";
  button.dataset.field = field;
  button.dataset.value = value;
  button.dataset.count = String(count);
  button.setAttribute("aria-pressed", String(chosen));
  if (field === "color") button.append(swatch(value));
  const counted = element("span", "count");
  counted.append(hidden(", "), String(count), hidden(count === 1 ? " photo" : " photos"));
  button.append(element("span", "name", value), counted);
  return button;
}

// What the counts were counted over, in a visitor's words.
function noteOf(facets) {
  const photos = Number(facets.photos) || 0;
  const noun = photos === 1 ? "photo" : "photos";
  if (facets.over === "score_threshold") {
    return `Counts over the ${photos} ${noun} above the minimum similarity.`;
  }
  return facets.capped
    ? `Counts over the ${photos} best matches.`
    : `Counts over the ${photos} matching ${noun}.`;
}

// Shows an answer's facet counts (null or absent: an older API, or a listing: no panel).
export function renderFacets(container, note, facets, params) {
  container.replaceChildren();
  const fields = facets && facets.fields && typeof facets.fields === "object" ? facets.fields : {};
  for (const [field, filter] of Object.entries(FACETS)) {
    const values = Array.isArray(fields[field]) ? fields[field] : [];
    if (!values.length) continue;
    const group = element("section", "facet");
    group.dataset.testid = `facet-${field}`;
    const list = element("ul", "facet-values");
    for (const { value, count } of values) {
      const item = element("li");
      item.append(valueButton(field, String(value), count, holds(params, filter, String(value))));
      list.append(item);
    }
    group.append(element("h3", "", FIELD_LABELS[field]), list);
    container.append(group);
  }
  note.hidden = !container.children.length;
  note.textContent = note.hidden ? "" : noteOf(facets);
}

// The chips of the filters a page URL's search holds; "Clear all" past one.
export function renderChips(list, params) {
  list.replaceChildren();
  const active = params ? activeFilters(params) : [];
  for (const { name, value } of active) {
    const chip = element("button", "chip");
    chip.type = "button";
    chip.dataset.testid = "chip";
    chip.dataset.name = name;
    chip.dataset.value = value;
    if (name === "color") chip.append(swatch(value));
    chip.append(`${FILTER_LABELS[name]}: ${value}`, hidden(" (remove)"));
    const item = element("li");
    item.append(chip);
    list.append(item);
  }
  if (active.length > 1) {
    const clear = element("button", "chip clear", "Clear all filters");
    clear.type = "button";
    clear.dataset.testid = "clear-filters";
    const item = element("li");
    item.append(clear);
    list.append(item);
  }
  list.hidden = !active.length;
  return active.length;
}

// The filter changes a click in the panel or on a chip asks for: [{name, value, on}], or
// null for a click elsewhere.
export function changeOf(target, params) {
  const value = target.closest("button[data-testid=facet]");
  if (value) {
    const name = FACETS[value.dataset.field];
    return [{ name, value: value.dataset.value, on: !holds(params, name, value.dataset.value) }];
  }
  const chip = target.closest("button[data-testid=chip]");
  if (chip) return [{ name: chip.dataset.name, value: chip.dataset.value, on: false }];
  if (target.closest("button[data-testid=clear-filters]")) {
    return activeFilters(params).map(({ name, value }) => ({ name, value, on: false }));
  }
  return null;
}
