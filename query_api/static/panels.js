// The panels a button opens and closes (a disclosure: the button's aria-expanded tells):
// "search by photo" under the search bar, and on a phone the filter panel above the results
// (on a wide screen that panel is always shown beside them: app.css).

// Opens or closes `panel` with `button`; Escape inside it closes it and gives the focus back.
// `shown(panel, open)` shows or hides it. Returns a function that sets it open or closed.
export function disclosure(button, panel, shown) {
  const set = (open) => {
    button.setAttribute("aria-expanded", String(open));
    shown(panel, open);
  };
  button.addEventListener("click", () => set(button.getAttribute("aria-expanded") !== "true"));
  panel.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || button.getAttribute("aria-expanded") !== "true") return;
    if (event.defaultPrevented) return; // a list inside closed itself
    event.preventDefault();
    set(false);
    button.focus();
  });
  return set;
}

// A panel that floats over the page closes when the visitor clicks elsewhere.
export function closeOnOutsideClick(button, panel, set) {
  document.addEventListener("click", (event) => {
    if (button.getAttribute("aria-expanded") !== "true") return;
    if (panel.contains(event.target) || button.contains(event.target)) return;
    set(false);
  });
}
