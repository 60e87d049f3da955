// The search box's suggestions as the visitor types: an ARIA 1.2 combobox over a listbox of
// GET /v1/suggest's completions. Down and Up move through them, Enter picks one, Escape
// closes the list; a click picks one too. Requests wait for a pause in the typing, and an
// answer to an older text than the box holds is dropped. An API without the route (404)
// turns suggestions off for the page's life: the box stays a plain search box.

import { call } from "./api.js";

const PAUSE_MS = 150;
const LIMIT = 8;

export function attachSuggestions(input, listbox, pick) {
  let timer = 0;
  let asked = 0; // the latest request; older answers are dropped
  let active = -1;
  let off = false;
  let controller = null;

  const options = () => [...listbox.querySelectorAll("[role=option]")];

  function highlight(index) {
    const all = options();
    active = index;
    all.forEach((option, i) => option.setAttribute("aria-selected", String(i === index)));
    if (index >= 0) {
      input.setAttribute("aria-activedescendant", all[index].id);
      all[index].scrollIntoView({ block: "nearest" });
    } else {
      input.removeAttribute("aria-activedescendant");
    }
  }

  // Hides the list; Down shows its options again.
  function close() {
    listbox.hidden = true;
    input.setAttribute("aria-expanded", "false");
    highlight(-1);
  }

  // Forgets what is asked and shown: a search ran, so no late answer may reopen the list.
  function cancel() {
    clearTimeout(timer);
    asked += 1;
    if (controller) controller.abort();
    close();
    listbox.replaceChildren();
  }

  function show(texts) {
    listbox.replaceChildren(
      ...texts.map((text, i) => {
        const option = document.createElement("li");
        option.id = `suggestion-${i}`;
        option.setAttribute("role", "option");
        option.setAttribute("aria-selected", "false");
        option.dataset.testid = "suggestion";
        option.textContent = text;
        return option;
      }),
    );
    active = -1;
    input.removeAttribute("aria-activedescendant");
    listbox.hidden = texts.length === 0;
    input.setAttribute("aria-expanded", String(texts.length > 0));
  }

  async function ask(text) {
    const mine = ++asked;
    if (controller) controller.abort();
    controller = new AbortController();
    try {
      const query = new URLSearchParams({ q: text, limit: String(LIMIT) });
      const body = await call(`v1/suggest?${query}`, { signal: controller.signal });
      if (mine !== asked || input.value.trim() !== text) return;
      const texts = (Array.isArray(body.suggestions) ? body.suggestions : [])
        .map((s) => s && s.text)
        .filter((t) => typeof t === "string" && t && t !== text);
      show(texts);
    } catch (error) {
      if (error && error.status === 404) off = true;
      if (mine === asked) close();
    }
  }

  input.addEventListener("input", () => {
    clearTimeout(timer);
    const text = input.value.trim();
    if (off || !text) {
      cancel();
      return;
    }
    timer = setTimeout(() => ask(text), PAUSE_MS);
  });

  input.addEventListener("keydown", (event) => {
    const count = options().length;
    const open = !listbox.hidden && count > 0;
    if (event.key === "ArrowDown" && count > 0) {
      event.preventDefault();
      listbox.hidden = false;
      input.setAttribute("aria-expanded", "true");
      highlight(open ? (active + 1) % count : 0);
    } else if (event.key === "ArrowUp" && open) {
      event.preventDefault();
      highlight(active <= 0 ? count - 1 : active - 1);
    } else if (event.key === "Enter" && open && active >= 0) {
      event.preventDefault(); // the pick submits, not the form's own Enter
      const text = options()[active].textContent;
      cancel();
      pick(text);
    } else if (event.key === "Escape" && open) {
      event.preventDefault(); // a search box's Escape would clear the text too
      close();
    }
  });

  // A press on an option keeps the focus in the box; the click then picks it.
  listbox.addEventListener("mousedown", (event) => event.preventDefault());
  listbox.addEventListener("click", (event) => {
    const option = event.target.closest("[role=option]");
    if (!option) return;
    const text = option.textContent;
    cancel();
    pick(text);
  });
  input.addEventListener("blur", close);

  return { cancel };
}
