// PhotoSearch's page: text, image and "more like this" search over the query API.
"use strict";

(() => {
  const KEY_STORAGE = "photosearch.apiKey";
  const $ = (id) => document.getElementById(id);
  const form = $("search-form");
  const input = $("q");
  const imageInput = $("image");
  const keyInput = $("api-key");
  const status = $("status");
  const heading = $("results-heading");
  const grid = $("results");
  const more = $("more");

  // The search on screen: how to fetch one of its pages, and how many results it shows.
  let current = null;
  let shown = 0;
  let sequence = 0; // answers to an older request than the latest are dropped

  function storedKey() {
    try {
      return localStorage.getItem(KEY_STORAGE) || "";
    } catch {
      return "";
    }
  }

  function storeKey(value) {
    try {
      if (value) localStorage.setItem(KEY_STORAGE, value);
      else localStorage.removeItem(KEY_STORAGE);
    } catch {
      // Storage refused (private mode): the key still works for this page.
    }
  }

  // The page size and filters every kind of search takes, as they are when it starts.
  function filterParams() {
    const params = new URLSearchParams();
    params.set("limit", $("limit").value);
    for (const tag of $("tags").value.split(",")) {
      if (tag.trim()) params.append("tags_any", tag.trim());
    }
    for (const [id, name] of [["photographer", "photographer"], ["license", "license"]]) {
      const value = $(id).value.trim();
      if (value) params.set(name, value);
    }
    // Whole days: from the start of the first to the end of the last.
    const from = $("created-from").value;
    const to = $("created-to").value;
    if (from) params.set("created_from", `${from}T00:00:00`);
    if (to) params.set("created_to", `${to}T23:59:59`);
    const threshold = $("score-threshold").value;
    if (threshold !== "") params.set("score_threshold", threshold);
    return params;
  }

  // The query string of one page of a search.
  function pageOf(params, offset) {
    const page = new URLSearchParams(params);
    if (offset) page.set("offset", String(offset));
    return page;
  }

  function photoPath(id) {
    return id.split("/").map(encodeURIComponent).join("/");
  }

  async function call(url, init = {}) {
    const headers = new Headers(init.headers || {});
    headers.set("Accept", "application/json");
    const key = keyInput.value.trim();
    if (key) headers.set("X-API-Key", key);
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
      let message = (body && body.message) || `The search failed (HTTP ${response.status}).`;
      const retry = response.headers.get("Retry-After");
      // 503: the service is busy or a dependency is down; 429: this caller's rate limit.
      if ((response.status === 503 || response.status === 429) && retry) {
        message += `${/[.!?]$/.test(message) ? "" : "."} Try again in ${retry} s.`;
      }
      throw new Error(message);
    }
    if (!body || !Array.isArray(body.results)) throw new Error("The answer was not understood.");
    return body;
  }

  // With anonymous search off, thumbnails want the key too, which an <img> cannot send.
  function loadThumbnail(img, url) {
    const key = keyInput.value.trim();
    if (!key) {
      img.src = url;
      return;
    }
    fetch(url, { headers: { "X-API-Key": key } })
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

  function card(result) {
    const title = (result.metadata && result.metadata.title) || result.id;
    // A score just below zero would read "-0.00", which looks like a bug to a visitor.
    const score = result.score.toFixed(2).replace(/^-(0\.00)$/, "$1");
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "card";
    button.dataset.testid = "result";
    button.dataset.id = result.id;
    button.dataset.score = score;
    button.setAttribute("aria-label", `${title}, score ${score}: show more like this`);
    const img = document.createElement("img");
    img.alt = title;
    img.decoding = "async";
    loadThumbnail(img, result.thumbnail_url);
    const caption = document.createElement("span");
    caption.className = "title";
    caption.dataset.testid = "result-title";
    caption.textContent = title;
    const scoreLabel = document.createElement("span");
    scoreLabel.className = "score";
    scoreLabel.dataset.testid = "result-score";
    scoreLabel.textContent = score;
    button.append(img, caption, scoreLabel);
    button.addEventListener("click", () => similar(result.id, title));
    item.append(button);
    return item;
  }

  function describe(body) {
    const parts = [`${shown} result${shown === 1 ? "" : "s"}`];
    if (body.next_offset !== null) parts[0] += ", more available";
    parts.push(`model version ${body.model_version}`);
    // Told to an operator's key only (null otherwise): whether the cache answered.
    if (current.text && body.cached !== null && body.cached !== undefined) {
      parts.push(body.cached ? "query embedding cached" : "query embedding not cached");
    }
    parts.push(`${Math.round(body.took_ms)} ms`);
    return parts.join(" · ");
  }

  async function show(search, append) {
    const mine = ++sequence;
    grid.dataset.requests = String(sequence);
    const offset = append ? current.nextOffset : 0;
    if (!append) {
      current = search;
      shown = 0;
      grid.replaceChildren();
      heading.textContent = search.heading;
      heading.hidden = false;
      more.hidden = true;
    }
    grid.setAttribute("aria-busy", "true");
    status.classList.remove("error");
    status.textContent = "Searching…";
    try {
      const body = await current.fetchPage(offset);
      if (mine !== sequence) return;
      grid.append(...body.results.map(card));
      shown += body.results.length;
      current.nextOffset = body.next_offset;
      more.hidden = body.next_offset === null;
      status.textContent = describe(body);
      if (!append && search.focusHeading) heading.focus();
    } catch (error) {
      if (mine !== sequence) return;
      status.classList.add("error");
      status.textContent = error.message;
    } finally {
      if (mine === sequence) grid.removeAttribute("aria-busy");
    }
  }

  function textSearch(q) {
    const params = filterParams();
    params.set("q", q);
    show({
      heading: `Results for “${q}”`,
      text: true,
      fetchPage: (offset) => call(`v1/search?${pageOf(params, offset)}`),
    }, false);
  }

  function imageSearch(file) {
    const params = filterParams();
    show({
      heading: `Photos like ${file.name}`,
      fetchPage: (offset) => {
        const data = new FormData();
        data.append("file", file, file.name);
        return call(`v1/search/image?${pageOf(params, offset)}`, { method: "POST", body: data });
      },
    }, false);
  }

  function similar(id, title) {
    const params = filterParams();
    const path = `v1/photos/${photoPath(id)}/similar`;
    show({
      heading: `More like ${title}`,
      focusHeading: true,
      fetchPage: (offset) => call(`${path}?${pageOf(params, offset)}`),
    }, false);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = input.value.trim();
    if (q) {
      textSearch(q);
    } else {
      status.classList.add("error");
      status.textContent = "Type what the photo shows, or choose an image.";
      input.focus();
    }
  });

  imageInput.addEventListener("change", () => {
    const [file] = imageInput.files;
    if (file) imageSearch(file);
  });

  more.addEventListener("click", () => {
    if (current && current.nextOffset !== null) show(current, true);
  });

  // A model with random weights (no pretrained ones on this machine) ranks text at random:
  // say so before anyone trusts the results.
  const notice = $("model-notice");
  async function checkModel() {
    const headers = { Accept: "application/json" };
    const key = keyInput.value.trim();
    if (key) headers["X-API-Key"] = key;
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

  keyInput.value = storedKey();
  keyInput.addEventListener("change", () => {
    storeKey(keyInput.value.trim());
    checkModel();
  });
  checkModel();

  // "/" anywhere but in a field moves to the search box.
  document.addEventListener("keydown", (event) => {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target instanceof HTMLElement &&
        (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) {
      return;
    }
    event.preventDefault();
    input.focus();
    input.select();
  });
})();
