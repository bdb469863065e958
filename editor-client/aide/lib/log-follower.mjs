// One run's log, as the daemon keeps it: followed through the `arena/logs`
// cursor (which stays valid across arena-ls restarts), woken by `arena/log`
// notifications, held in a bounded ring buffer, and read back from any seq.
// Lines older than the buffer are read again from arena-ls, starting at the
// nearest bookmarked cursor, so a page that reconnects after a long gap still
// gets every line in order, each once.
import { ServerUnavailable } from "./arena-client.mjs";

const PAGE = 1000;
const BOOKMARK_EVERY = 1000;
const POLL_MS = 1000;
const RETRY_MS = 500;
/** arena-ls refused this run's log this many times in a row (not "unavailable"): the follower gives up. */
const REFUSALS_BEFORE_GIVING_UP = 5;

/** Removes terminal escape sequences (colours, cursor moves) before a line reaches a page. */
export function stripAnsi(text) {
  return String(text)
    .replace(/\u001b\[[0-?]*[ -/]*[@-~]/g, "")
    .replace(/\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)/g, "")
    .replace(/\u001b[@-Z\\-_]/g, "");
}

function cleanLine(line) {
  return { seq: line.seq, stream: line.stream, text: stripAnsi(line.text ?? ""), at: line.at ?? null };
}

export class LogFollower {
  constructor({ client, runId, bufferLines = 5000, logger = console }) {
    this.client = client;
    this.runId = runId;
    this.bufferLines = bufferLines;
    this.logger = logger;
    this.buffer = [];
    this.evictedThrough = -Infinity;
    this.lastSeq = -1;
    this.cursor = null;
    this.bookmarks = [{ afterSeq: -1, cursor: null }];
    this.done = false;
    this.closed = false;
    this.subscribers = 0;
    this._waiters = [];
    this._doneWaiters = [];
    this.error = null;
    this._wake = null;
    this._pump = this._run();
  }

  /** An `arena/log` notification for this run: there is more to read. */
  poke() {
    const wake = this._wake;
    this._wake = null;
    wake?.();
  }

  close() {
    this.closed = true;
    this.poke();
    this._notify();
    this._finished();
  }

  /** Resolves once the log is read to its end (or the follower is closed or gave up). */
  whenDone() {
    if (this.done || this.closed) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this._doneWaiters.push(resolve));
  }

  _finished() {
    for (const resolve of this._doneWaiters.splice(0)) {
      resolve();
    }
  }

  _notify() {
    for (const resolve of this._waiters.splice(0)) {
      resolve();
    }
  }

  /** Resolves when a line is appended, the log ends, or `ms` pass. */
  changed(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(timer);
        const index = self._waiters.indexOf(done);
        if (index >= 0) {
          self._waiters.splice(index, 1);
        }
        resolve();
      }
      this._waiters.push(done);
    });
  }

  _sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this._wake = null;
        resolve();
      }, ms);
      this._wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  async _run() {
    let readSinceBookmark = 0;
    let refusals = 0;
    while (!this.closed && !this.done) {
      let page;
      try {
        await this.client.whenReady();
        page = await this.client.request("arena/logs", { runId: this.runId, cursor: this.cursor, limit: PAGE });
      } catch (error) {
        if (this.closed) {
          return;
        }
        if (!(error instanceof ServerUnavailable)) {
          this.logger.error?.(`arena/logs ${this.runId}: ${error?.message ?? error}`);
          refusals += 1;
          if (refusals >= REFUSALS_BEFORE_GIVING_UP) {
            // Never a loop that asks forever for a log arena-ls will not give (issue 39: endless followers).
            this.error = String(error?.message ?? error);
            this.done = true;
            this._notify();
            this._finished();
            return;
          }
        }
        await this._sleep(RETRY_MS * 2 ** refusals);
        continue;
      }
      refusals = 0;
      const fresh = (page.lines ?? []).filter((line) => Number.isInteger(line.seq) && line.seq > this.lastSeq);
      for (const line of page.lines ?? []) {
        if (!Number.isInteger(line.seq) || line.seq < 0) {
          this.logger.error?.(`arena/logs ${this.runId}: ${line.text}`);
        }
      }
      if (page.cursor) {
        this.cursor = page.cursor;
      }
      if (fresh.length > 0) {
        this._append(fresh.map(cleanLine));
        readSinceBookmark += fresh.length;
        if (readSinceBookmark >= BOOKMARK_EVERY && page.cursor) {
          this.bookmarks.push({ afterSeq: this.lastSeq, cursor: page.cursor });
          readSinceBookmark = 0;
        }
        continue;
      }
      if (page.done === true) {
        this.done = true;
        this._notify();
        this._finished();
        return;
      }
      await this._sleep(POLL_MS);
    }
  }

  _append(lines) {
    this.buffer.push(...lines);
    this.lastSeq = lines[lines.length - 1].seq;
    const extra = this.buffer.length - this.bufferLines;
    if (extra > 0) {
      this.evictedThrough = this.buffer[extra - 1].seq;
      this.buffer.splice(0, extra);
    }
    this._notify();
  }

  /** Index of the first buffered line with seq > since. */
  _indexAfter(since) {
    let low = 0;
    let high = this.buffer.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.buffer[middle].seq <= since) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    return low;
  }

  /** The buffered lines, newest last: what `status` shows. */
  tail(count) {
    return this.buffer.slice(-count);
  }

  /**
   * Up to `limit` lines after seq `since`, in order: from the buffer when it
   * holds them, else read again from arena-ls (from the nearest bookmark).
   */
  async linesAfter(since, limit) {
    if (since >= this.evictedThrough) {
      const start = this._indexAfter(since);
      return this.buffer.slice(start, start + limit);
    }
    return this._readOld(since, limit);
  }

  async _readOld(since, limit) {
    let mark = this.bookmarks[0];
    for (const bookmark of this.bookmarks) {
      if (bookmark.afterSeq <= since) {
        mark = bookmark;
      }
    }
    let cursor = mark.cursor;
    for (;;) {
      await this.client.whenReady();
      const page = await this.client.request("arena/logs", { runId: this.runId, cursor, limit: PAGE });
      const lines = (page.lines ?? []).filter((line) => Number.isInteger(line.seq) && line.seq > since);
      if (lines.length > 0 || (page.lines ?? []).length === 0) {
        return lines.slice(0, limit).map(cleanLine);
      }
      cursor = page.cursor;
    }
  }

  /** True once the run has ended and every line after `since` is read. */
  finishedAfter(since) {
    return this.done && since >= this.lastSeq;
  }
}
