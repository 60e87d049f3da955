// What a visitor reads when the API refuses a request as invalid (422): each of the API's
// details (the field, and pydantic's error type) in the page's words. A detail the page has
// no words for keeps the API's own text, so a new rule of the API is still explained.

// The fields the page sends, as a sentence names them.
const LABELS = {
  q: "Your search",
  not: "A \u201cnot like\u201d description",
  tags_any: "A tag",
  tags_all: "A tag",
  photographer: "The photographer",
  license: "The license",
  created_from: "The \u201ccreated from\u201d date",
  created_to: "The \u201ccreated to\u201d date",
  score_threshold: "The minimum similarity",
  limit: "The number per page",
  offset: "The page",
  diversity: "The variety",
  url: "The image address",
};
// The lists among them, for "too many".
const LISTS = {
  not: "\u201cnot like\u201d descriptions",
  tags_any: "tags",
  tags_all: "tags",
};
const SEARCH_MISSING = "Type what the photo shows.";

function fieldOf(loc) {
  const names = (Array.isArray(loc) ? loc : []).filter(
    (part) => typeof part === "string" && part !== "query" && part !== "body",
  );
  return names[names.length - 1] || "";
}

// The limit a length error names ("at most 500 characters", "longer than 500 characters").
function limitOf(msg) {
  const found = /(?:at most|longer than) (\d+)/.exec(msg);
  return found ? found[1] : null;
}

function explain(detail) {
  const field = fieldOf(detail.loc);
  const label = LABELS[field];
  const msg = String(detail.msg || "");
  const type = String(detail.type || "");
  if (!label) return null;
  const limit = limitOf(msg);
  if (type === "too_long" && LISTS[field] && limit) {
    return `Too many ${LISTS[field]}: at most ${limit}.`;
  }
  if ((type === "string_too_long" || type === "too_long" || type === "value_error") && limit) {
    return `${label} is too long: at most ${limit} characters.`;
  }
  if (field === "q" && (type === "missing" || type === "string_too_short" || /blank/.test(msg))) {
    return SEARCH_MISSING;
  }
  if (type === "missing" || type === "string_too_short") return `${label} is missing.`;
  if (/^(greater|less)_than/.test(type)) {
    return `${label} ${msg.replace(/^Input should be/, "must be")}.`;
  }
  if (type === "float_parsing" || type === "int_parsing" || type === "finite_number") {
    return `${label} must be a number.`;
  }
  if (type.startsWith("date") || type.startsWith("datetime")) return `${label} must be a date.`;
  return null;
}

// The sentence for a 422 answer's body; null when it has no details to go by.
export function invalidRequestMessage(body) {
  const details = body && Array.isArray(body.details) ? body.details : [];
  if (!details.length) return null;
  const sentences = details.map((detail) => {
    const own = explain(detail);
    if (own) return own;
    const field = fieldOf(detail.loc);
    const text = String(detail.msg || "invalid").replace(/^Value error, /, "");
    return `${field ? `${field}: ` : ""}${text}${/[.!?]$/.test(text) ? "" : "."}`;
  });
  return [...new Set(sentences)].join(" ");
}
