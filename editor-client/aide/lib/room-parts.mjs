// The Training Room panel's parts that hold no panel state: its words for a run and a job, the log
// pane's buffer, the "show raw lines" choice, and DOM building (moved out of training-room.js, which
// imports them). A browser module: served beside training-room.js as lib/room-parts.mjs.
import { commitText, finishedPrompt, formatEta, keepAwakeReason, keepAwakeText, isAnnouncement, resumedFromLine, skippedLines } from "./core.mjs";

export const POLL_MS = 2000;
export const MAX_LOG_LINES = 2000;
export const MAX_NOTICES = 5;
const SHOW_RAW_KEY = "arena.showRawLines";

export function stripAnsi(text) {
  return String(text)
    .replace(/\u001b\[[0-?]*[ -/]*[@-~]/g, "")
    .replace(/\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)/g, "")
    .replace(/\u001b[@-Z\\-_]/g, "")
    .replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, "");
}

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") {
      node.className = value;
    } else if (key === "text") {
      node.textContent = value;
    } else if (value !== undefined && value !== null && value !== false) {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child);
    }
  }
  return node;
}

/** `trainers/train.py:12` from a diagnostic's uri and range (line numbers from 1). */
export function placeOf(diagnostic, workspace) {
  let file = String(diagnostic.uri ?? "");
  try {
    file = decodeURIComponent(new URL(file).pathname);
  } catch {
    // not a URL: shown as it is
  }
  if (workspace && file.startsWith(`${workspace}/`)) {
    file = file.slice(workspace.length + 1);
  }
  const line = diagnostic.range?.start?.line;
  return Number.isInteger(line) ? `${file}:${line + 1}` : file;
}

export function finite(value) {
  return typeof value === "number" && Number.isFinite(value);
}

function seconds(value) {
  return formatEta(value) ?? "?";
}

/** `lost` of a stop result as words; null means the server could not tell. */
export function lostText(lost, step, checkpointStep) {
  if (!lost || typeof lost !== "object") {
    // An older server sends no `lost`: a checkpoint at the very step the run stopped loses nothing.
    return finite(step) && step === checkpointStep ? "no work lost (checkpoint at the last step)" : "work lost: unknown";
  }
  if (lost.steps === 0) {
    return "no work lost (the stop saved a checkpoint)";
  }
  return `work lost: ${lost.steps} steps (${seconds(lost.seconds)}) since the last checkpoint`;
}

/** Steps per second from two readings of a run, when the daemon sends none. */
export function measuredSpeed(previous, active, now) {
  if (!previous || previous.runId !== active.runId || !finite(previous.step) || !finite(active.step)) {
    return undefined;
  }
  const elapsed = (now - previous.at) / 1000;
  return elapsed > 0 && active.step > previous.step ? (active.step - previous.step) / elapsed : undefined;
}

/**
 * Whether a line of the page's log (`{line, stream}`, as the daemon sends it) is
 * one of the trainer's well-formed `@arena {...}` announcements (contract
 * section 3): the VS Code core's rule, so a line that only looks like one (not
 * a JSON object naming its `event`, or on stderr) is a readable line.
 */
/** The checkpoint line, and which checkpoint the run resumed from and why (contract 8.2: `resumedFrom`). */
export function withResume(text, run) {
  const resumed = resumedFromLine(run?.resumedFrom);
  return resumed ? [text, resumed, ...skippedLines(run.resumedFrom)].join(" · ") : text;
}

export function isRawLine(data) {
  return isAnnouncement({ stream: data?.stream, text: data?.line });
}

/**
 * The lines the log pane can show in either mode: the newest `limit` readable
 * lines (raw lines hidden, the default) and the newest `limit` lines of all
 * (raw lines shown). Older entries are dropped, so it never holds more than
 * about 3 × `limit` (a trainer that prints mostly announcements cannot push
 * its readable lines out of the default view).
 */
export class LogBuffer {
  constructor(limit = MAX_LOG_LINES) {
    this.limit = limit;
    this.entries = [];
    this.readable = 0;
  }

  /** Adds `{data, raw, ...}`; returns the entry. */
  add(entry) {
    this.entries.push(entry);
    if (!entry.raw) {
      this.readable += 1;
    }
    while (this.readable > this.limit) {
      // Everything up to the oldest readable line is older than both windows.
      const dropped = this.entries.shift();
      if (!dropped.raw) {
        this.readable -= 1;
      }
    }
    if (this.entries.length > 3 * this.limit) {
      const newest = this.entries.length - this.limit;
      this.entries = this.entries.filter((candidate, index) => !candidate.raw || index >= newest);
    }
    return entry;
  }

  /** The entries the pane shows, oldest first. */
  shown(showRaw) {
    const pool = showRaw ? this.entries : this.entries.filter((entry) => !entry.raw);
    return pool.slice(-this.limit);
  }

  clear() {
    this.entries = [];
    this.readable = 0;
  }
}

/**
 * The log pane: its rows kept (a `LogBuffer`, for the raw lines' checkbox), and the lines that came
 * since the last frame put into the page at once, with one look at its scroll position. Reading it
 * after each line made the browser lay the whole log out again for every line: 3,000 lines at 200 a
 * second took 3,000 layouts, 7-8 s of layout and 8-10 s of the page's main thread in 15 s; once a
 * frame, 150 layouts, 0.5 s and 1.4-1.6 s (Chromium: e2e/log-flood.bench.mjs, docs/performance.md).
 */
export class LogPane {
  constructor(element, limit = MAX_LOG_LINES) {
    this.element = element;
    this.limit = limit;
    this.lines = new LogBuffer(limit);
    this.pending = [];
    this.flushScheduled = false;
  }

  /** Keeps the row; shows it at the next frame unless it is a raw line and those are hidden. */
  add(row, raw, showRaw) {
    this.lines.add({ row, raw });
    if (raw && !showRaw) {
      return;
    }
    this.pending.push(row);
    if (this.pending.length > this.limit) {
      this.pending.splice(0, this.pending.length - this.limit); // a hidden page: no frame came
    }
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      nextFrame(() => this.flush());
    }
  }

  flush() {
    this.flushScheduled = false;
    const rows = this.pending;
    this.pending = [];
    if (rows.length === 0) {
      return;
    }
    this._keepingTheBottom(() => {
      this.element.append(...rows);
      while (this.element.childElementCount > this.limit) {
        this.element.firstElementChild.remove();
      }
    });
  }

  /** Every kept row again, the raw lines shown or not (the checkbox). */
  showAll(showRaw) {
    this.pending = []; // the buffer holds them: shown below, or hidden
    this._keepingTheBottom(() => this.element.replaceChildren(...this.lines.shown(showRaw).map((entry) => entry.row)));
  }

  clear() {
    this.lines.clear();
    this.pending = [];
    this.element.replaceChildren();
  }

  /** Runs `change`; a pane scrolled to its bottom before it stays there after. */
  _keepingTheBottom(change) {
    const pane = this.element;
    const atBottom = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 4;
    change();
    if (atBottom) {
      pane.scrollTop = pane.scrollHeight;
    }
  }
}

/** Calls `callback` before the page's next paint; where there are no frames (no `requestAnimationFrame`), soon. */
function nextFrame(callback) {
  if (typeof requestAnimationFrame === "function") {
    requestAnimationFrame(callback);
  } else {
    setTimeout(callback, 16);
  }
}

/** The "show raw lines" choice kept in the page's localStorage (absent or unreadable: hidden). */
export function storedShowRaw(storage) {
  try {
    return storage?.getItem(SHOW_RAW_KEY) === "true";
  } catch {
    return false;
  }
}

export function storeShowRaw(storage, value) {
  try {
    storage?.setItem(SHOW_RAW_KEY, value ? "true" : "false");
  } catch {
    // a page without storage forgets the choice on reload
  }
}

export function pageStorage() {
  try {
    return typeof localStorage === "undefined" ? null : localStorage;
  } catch {
    return null;
  }
}

/** The offer for a job whose last run trained all its steps: start fresh, or nothing (resuming would train nothing). */
export function finishedOffer(job) {
  const name = job.name ?? job.id;
  const freshLabel = "Start fresh";
  return {
    finished: true,
    step: job.lastCheckpoint?.step ?? null,
    // The words of 1012 (already-finished) in every client: which run trained all the steps, and when.
    prompt: finishedPrompt(name, { runId: job.lastRunId, totalSteps: job.totalSteps, endedAt: job.endedAt }, new Date()),
    freshLabel,
    labels: [freshLabel],
  };
}

/** The run record's line under the run (contract 8.3): `code: abc123 (dirty)`, or "" without a record. */
export function recordText(run) {
  if (!run || !run.record) {
    return "";
  }
  return `code: ${commitText(run.record) ?? "not in a git repository"}`;
}

/**
 * Whether the active run keeps the machine awake (contract 8.3), in the words of every client;
 * `reason` is the run's log line's (`the machine cannot be kept awake during this run: …`) when seen.
 */
export function keepAwakeLine(active, reason) {
  return active ? keepAwakeText(active, reason) ?? "" : "";
}

/** The reason a page's log line (`{line, stream}`) gives why the machine may sleep, or undefined. */
export function keepAwakeReasonOf(data) {
  return data?.stream === "arena" ? keepAwakeReason([{ seq: 0, stream: "arena", text: String(data.line ?? "") }]) : undefined;
}

/** The body the offer's button posts: the person's click approves the resume at the offered step. */
export function offerStartBody(offer) {
  return { id: offer.id, approved: true, resume: true, startStep: offer.startStep };
}

/** One quick fix of a blocked job as a button ("Fix: TITLE"; its title attribute names the codes it answers). */
export function fixButton(job, fix, onClick) {
  const answers = (fix.codes ?? []).length > 0 ? `fixes ${fix.codes.join(", ")}` : "";
  const button = el("button", { type: "button", class: "tr-fix-button", "data-job": job.id, "data-fix": fix.title, title: answers, text: `Fix: ${fix.title}` });
  button.addEventListener("click", onClick);
  return button;
}
