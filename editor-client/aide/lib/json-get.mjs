// `node json-get.mjs PATH < file.json`: prints the value at PATH (`active.status`,
// `jobs.length`, `logs[-1].seq`, `tail[-1]`); objects as JSON, null/missing as "null".
// verify-gates.sh uses it so the gates need no jq.
import { readFileSync } from "node:fs";

const text = readFileSync(0, "utf8");
let value;
try {
  value = text.trim() === "" ? null : JSON.parse(text);
} catch {
  console.log("null");
  process.exit(0);
}
for (const part of (process.argv[2] ?? "").split(/\.|(?=\[)/).filter(Boolean)) {
  if (value === null || value === undefined) {
    break;
  }
  const index = /^\[(-?\d+)\]$/.exec(part);
  if (index) {
    const at = Number(index[1]);
    value = Array.isArray(value) ? value[at < 0 ? value.length + at : at] : undefined;
  } else if (part === "length" && (Array.isArray(value) || typeof value === "string")) {
    value = value.length;
  } else {
    value = value[part];
  }
}
console.log(value === undefined || value === null ? "null" : typeof value === "object" ? JSON.stringify(value) : String(value));
