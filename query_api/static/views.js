// What each view of the page shows and where its pages come from: text, "more like this",
// near-duplicates, recommend, and search by an image's address or an uploaded file. A
// search's first page asks for the filter panel's facet counts too.

import { call, photoPath, refusesParameter, searchPage } from "./api.js";
import { knownTitle } from "./results.js";
import { apiParams, FACETS } from "./state.js";

const FACET_FIELDS = Object.keys(FACETS).join(",");
// False once the API refused the parameter (an API older than facets): asked no more.
let facetsKnown = true;

export function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

function titled(id, named) {
  return named(knownTitle(id) || id);
}

// One page of a search, with the facet counts on its first page where the API has them.
async function faceted(offset, fetchPage) {
  if (offset !== 0 || !facetsKnown) return fetchPage(null);
  try {
    return await fetchPage(FACET_FIELDS);
  } catch (error) {
    if (!refusesParameter(error, "facets")) throw error;
    facetsKnown = false;
    return fetchPage(null);
  }
}

// How to fetch a view's pages, and what to call it.
export function sourceOf(view, params) {
  const query = (offset, facets) => {
    const api = apiParams(params, offset);
    if (facets) api.set("facets", facets);
    return api;
  };
  const searched = (path, init = () => ({})) => (offset) =>
    faceted(offset, (facets) => searchPage(`${path}?${query(offset, facets)}`, init()));
  switch (view.kind) {
    case "text":
      return {
        heading: `Results for “${view.q}”`,
        text: true,
        page: searched("v1/search"),
      };
    case "similar": {
      const named = (title) => `More like ${title}`;
      return {
        heading: titled(view.id, named),
        named,
        page: searched(`v1/photos/${photoPath(view.id)}/similar`),
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
        page: searched("v1/search/recommend"),
      };
    }
    case "image_url":
      return {
        heading: `Photos like ${view.url}`,
        page: searched("v1/search/image", () => ({
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ url: view.url }),
        })),
      };
    case "upload":
      return {
        heading: `Photos like ${view.file.name}`,
        page: searched("v1/search/image", () => {
          const data = new FormData();
          data.append("file", view.file, view.file.name);
          return { method: "POST", body: data };
        }),
      };
    default:
      throw new Error(`unknown view ${view.kind}`);
  }
}
