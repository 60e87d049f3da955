// The 12 colour names the indexer gives a photo (its palette), in the order a panel lists them.
// The swatches' colours are app.css's ([data-color]): the page's policy refuses inline styles.

export const PALETTE = [
  "red",
  "orange",
  "yellow",
  "green",
  "teal",
  "blue",
  "purple",
  "pink",
  "brown",
  "black",
  "grey",
  "white",
];

// A colour's swatch: a small square that app.css paints; hidden from assistive technology,
// which reads the name beside it.
export function swatch(name) {
  const element = document.createElement("span");
  element.className = "swatch";
  element.dataset.color = PALETTE.includes(name) ? name : "other";
  element.setAttribute("aria-hidden", "true");
  return element;
}
