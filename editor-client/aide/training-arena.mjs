// AIDE's Training Room on arena-ls: a drop-in for the SOP's TrainingManager
// (daemon/training-manager.mjs) and the HTTP routes of contract section 7.4,
// served on the daemon's own http.Server.
//
//   import { attachTrainingArena } from "./training-arena.mjs";
//   attachTrainingArena(server, { workspace });          // the one line in server.mjs
//
// arena-ls runs as a child over stdio (LSP, vscode-languageserver-protocol);
// when it dies it is restarted with backoff, and the runs, which belong to
// their job agents, are re-adopted by the new server.
import http from "node:http";
import { TOKEN_HEADER, peerIsOwner, tokenMatches } from "./lib/trust.mjs";
import { MAX_FOLLOWERS } from "./lib/run-followers.mjs";
import { stripAnsi } from "./lib/log-follower.mjs";
import { isLoopbackAddress, isLoopbackHostName } from "./lib/launch.mjs";
import { TrainingError, httpError } from "./lib/http-errors.mjs";
import { pageLine, runShape } from "./lib/shapes.mjs";
import { JSON_PAGE_DEFAULT, TrainingManager } from "./lib/training-manager.mjs";
import { applyJobFix, jobFixes } from "./lib/job-fixes.mjs";

// The module's API, as before its split: the shapes, errors and launch helpers live in lib/.
export { MAX_FOLLOWERS, stripAnsi };
export { DEFAULT_ORIGIN, RUN_ID_SHAPE } from "./lib/training-manager.mjs";
export { Messages, TrainingError, httpError } from "./lib/http-errors.mjs";
export { defaultArenaCommand, parseCommand, isLoopbackAddress } from "./lib/launch.mjs";
export { pageLine, statusLogLines, activeShape, runShape, finishedAllSteps, interruptedShape } from "./lib/shapes.mjs";

const MAX_BODY_BYTES = 64 * 1024;
const ROUTES = new Set(["/health", "/api/training/status", "/api/training/start", "/api/training/stop", "/api/training/logs"]);

/** The Training Room on arena-ls (lib/training-manager.mjs) and its HTTP routes of contract 7.4. */
export class TrainingArena extends TrainingManager {
  /** A blocked job's quick fixes (lib/job-fixes.mjs): `GET /api/training/fixes?id=`. */
  async fixes(id) {
    return jobFixes(this, id);
  }

  /** Applies one of them by title: `POST /api/training/fix {id, title}`. */
  async fix(body = {}) {
    return applyJobFix(this, body);
  }

  // -- HTTP -------------------------------------------------------------------------------

  /**
   * Serves the routes of 7.4. Returns false (and touches nothing) for any
   * other path, so the daemon's own routes go on as before.
   */
  async handle(req, res) {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const pathname = url.pathname;
    if (!ROUTES.has(pathname) && !pathname.startsWith("/api/training/")) {
      return false;
    }
    if (pathname === "/health" && !this.serveHealth) {
      return false;
    }
    try {
      await this._route(req, res, url);
    } catch (error) {
      const failure = httpError(error, "request");
      this._json(req, res, failure.status, failure.body);
    }
    return true;
  }

  /**
   * The page's secret: the `X-Arena-Token` header, or for a GET the `token`
   * query parameter (an EventSource cannot send headers). Whatever the Origin.
   */
  _tokenShown(req, url) {
    const header = req.headers[TOKEN_HEADER];
    if (typeof header === "string" && header !== "") {
      return tokenMatches(header, this.token);
    }
    return req.method === "GET" && tokenMatches(url.searchParams.get("token") ?? "", this.token);
  }

  /** The origin check: a request with no Origin (curl, a same-origin navigation) or the page's own. */
  _originAllowed(req) {
    const origin = req.headers.origin;
    return origin === undefined || this.origins.has(origin);
  }

  /** Against DNS rebinding: the Host must name this loopback socket (127.0.0.1, localhost or [::1], our port). */
  _hostAllowed(req) {
    const host = String(req.headers.host ?? "").toLowerCase();
    const match = /^(\[[0-9a-f:.]+\]|[^:]+)(?::(\d+))?$/.exec(host);
    if (!match) {
      return false;
    }
    const port = match[2] === undefined ? 80 : Number(match[2]);
    return isLoopbackHostName(match[1]) && port === req.socket.localPort;
  }

  _corsHeaders(req) {
    const headers = { Vary: "Origin" };
    const origin = req.headers.origin;
    const allowed = origin !== undefined && this.origins.has(origin) ? origin : [...this.origins][0];
    if (allowed) {
      headers["Access-Control-Allow-Origin"] = allowed;
    }
    return headers;
  }

  _json(req, res, status, body) {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const text = JSON.stringify(body);
    res.writeHead(status, {
      ...this._corsHeaders(req),
      "Content-Type": "application/json; charset=utf-8",
      "Content-Length": Buffer.byteLength(text),
      "Cache-Control": "no-store",
      "X-Content-Type-Options": "nosniff",
    });
    res.end(text);
  }

  _refuse(req, res, status, error) {
    // No CORS header on a refusal of the origin: the foreign page learns nothing.
    const text = JSON.stringify({ error });
    res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text), Connection: "close" });
    res.end(text);
    req.resume();
  }

  async _route(req, res, url) {
    if (!isLoopbackAddress(req.socket.localAddress)) {
      this._refuse(req, res, 403, "the Training Room answers on loopback addresses only");
      return;
    }
    if (!this._hostAllowed(req)) {
      this._refuse(req, res, 403, "Host is not this daemon's loopback address");
      return;
    }
    if (this.checkPeer && (await peerIsOwner(req.socket)) === false) {
      this._refuse(req, res, 403, "another account's request: the Training Room answers its owner's account only");
      return;
    }
    if (!this._originAllowed(req)) {
      this._refuse(req, res, 403, "origin not allowed");
      return;
    }
    if (req.method === "OPTIONS") {
      res.writeHead(204, {
        ...this._corsHeaders(req),
        "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
        "Access-Control-Allow-Headers": "Content-Type, Last-Event-ID, X-Arena-Token",
        "Access-Control-Max-Age": "600",
      });
      res.end();
      return;
    }
    const route = `${req.method} ${url.pathname}`;
    if (route !== "GET /health" && !this._tokenShown(req, url)) {
      req.resume();
      throw new TrainingError(403, { error: "the Training Room page's token is missing or wrong: reload the page (or read the daemon's token file)", reason: "token-required" });
    }
    switch (route) {
      case "GET /health":
        await Promise.race([this.client.whenReady().catch(() => {}), new Promise((resolve) => setTimeout(resolve, 5000))]);
        this._json(req, res, 200, {
          ok: true,
          arena: {
            version: this.client.serverInfo?.version ?? null,
            workspace: this.workspace,
            ready: this.client.ready,
            pid: this.client.pid,
            restarts: this.client.restarts,
            lastExit: this.client.lastExit,
            followers: this.followerCount,
          },
        });
        return;
      case "GET /api/training/status":
        this._json(req, res, 200, await this.status());
        return;
      case "POST /api/training/start":
        this._json(req, res, 200, await this.start(await this._body(req)));
        return;
      case "POST /api/training/stop":
        this._json(req, res, 200, await this.stop(await this._body(req)));
        return;
      case "GET /api/training/logs":
        await this._logsRoute(req, res, url);
        return;
      case "GET /api/training/fixes":
        this._json(req, res, 200, await this.fixes(url.searchParams.get("id")));
        return;
      case "POST /api/training/fix":
        this._json(req, res, 200, await this.fix(await this._body(req)));
        return;
      default:
        if (ROUTES.has(url.pathname)) {
          throw new TrainingError(405, { error: `${req.method} is not allowed on ${url.pathname}` });
        }
        throw new TrainingError(404, { error: `no route ${url.pathname.slice(0, 100)}` });
    }
  }

  /** A POST body: application/json only (415 otherwise, no simple-request CSRF), at most 64 KiB (413). */
  async _body(req) {
    const type = String(req.headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
    if (type !== "application/json") {
      req.resume();
      throw new TrainingError(415, { error: "the body must be application/json" });
    }
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) {
      req.resume();
      throw new TrainingError(413, { error: `the body is larger than ${MAX_BODY_BYTES} bytes` });
    }
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        req.resume();
        throw new TrainingError(413, { error: `the body is larger than ${MAX_BODY_BYTES} bytes` });
      }
      chunks.push(chunk);
    }
    const text = Buffer.concat(chunks).toString("utf8").trim();
    if (text === "") {
      return {};
    }
    let parsed;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new TrainingError(400, { error: "the body is not valid JSON" });
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw new TrainingError(400, { error: "the body must be a JSON object" });
    }
    return parsed;
  }

  _since(req, url) {
    const header = req.headers["last-event-id"];
    const raw = header !== undefined && header !== "" ? header : url.searchParams.get("since");
    if (raw === null || raw === undefined || raw === "") {
      return -1;
    }
    if (!/^-?\d{1,15}$/.test(String(raw)) || Number(raw) < -1) {
      throw new TrainingError(400, { error: "`since` (or Last-Event-ID) must be a line's seq" });
    }
    return Number(raw);
  }

  async _logsRoute(req, res, url) {
    const since = this._since(req, url);
    const runId = url.searchParams.get("runId") ?? undefined;
    if (url.searchParams.get("format") === "json") {
      const limitText = url.searchParams.get("limit");
      const limit = limitText === null ? JSON_PAGE_DEFAULT : Number(limitText);
      if (!Number.isInteger(limit) || limit < 1) {
        throw new TrainingError(400, { error: "`limit` must be a whole number from 1" });
      }
      this._json(req, res, 200, await this.logs({ since, runId, limit }));
      return;
    }
    const run = await this._runFor(runId);
    if (!run) {
      res.writeHead(204, this._corsHeaders(req));
      res.end();
      return;
    }
    const follower = this.follower(run.runId);
    // The end of a run's log is only known once it is read: a reconnect after `event: end` gets 204.
    if (follower.done && follower.finishedAfter(since)) {
      res.writeHead(204, this._corsHeaders(req));
      res.end();
      this._release(run.runId);
      return;
    }
    await this._stream(req, res, follower, run, since);
  }

  async _stream(req, res, follower, run, since) {
    res.writeHead(200, {
      ...this._corsHeaders(req),
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-store",
      Connection: "keep-alive",
      "X-Accel-Buffering": "no",
    });
    res.socket?.setNoDelay(true);
    let open = true;
    this.streams.add(res);
    follower.subscribers += 1;
    const closed = new Promise((resolve) => res.once("close", resolve));
    closed.then(() => {
      open = false;
    });
    const write = async (text) => {
      if (open && !res.write(text)) {
        await Promise.race([new Promise((resolve) => res.once("drain", resolve)), closed]);
      }
    };
    const keepalive = setInterval(() => {
      if (open) {
        res.write(": keepalive\n\n");
      }
    }, this.keepaliveMs);
    try {
      await write(`retry: 1000\n: run ${run.runId}\n\n`);
      let last = since;
      while (open) {
        const lines = await this._linesAfter(follower, last, 500);
        if (lines.length > 0) {
          let chunk = "";
          for (const line of lines) {
            chunk += `event: line\nid: ${line.seq}\ndata: ${JSON.stringify({ line: pageLine(run.jobId, line).line, at: line.at, stream: line.stream })}\n\n`;
          }
          last = lines[lines.length - 1].seq;
          await write(chunk);
          continue;
        }
        if (follower.finishedAfter(last)) {
          const final = runShape(await this._finalRun(run.runId)) ?? { runId: run.runId, id: run.jobId };
          await write(`event: end\ndata: ${JSON.stringify(final)}\n\n`);
          break;
        }
        await Promise.race([follower.changed(this.keepaliveMs), closed]);
      }
    } catch (error) {
      this.logger.error?.(`log stream of ${run.runId}: ${error?.message ?? error}`);
    } finally {
      clearInterval(keepalive);
      follower.subscribers -= 1;
      this.streams.delete(res);
      res.end();
      this._release(run.runId);
    }
  }
}

/**
 * The one line for AIDE's server.mjs: `attachTrainingArena(server, { workspace })`.
 * Every `request` listener already on the server keeps running for the paths
 * this module does not serve.
 */
export function attachTrainingArena(server, options) {
  const arena = options instanceof TrainingArena ? options : new TrainingArena(options);
  const previous = server.listeners("request");
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    arena.handle(req, res).then(
      (handled) => {
        if (!handled) {
          for (const listener of previous) {
            listener.call(server, req, res);
          }
          if (previous.length === 0) {
            res.writeHead(404, { "Content-Type": "application/json" });
            res.end(JSON.stringify({ error: "not found" }));
          }
        }
      },
      (error) => {
        arena.logger.error?.(`training arena: ${error?.stack ?? error}`);
        if (!res.headersSent) {
          res.writeHead(500);
        }
        res.end();
      },
    );
  });
  server.on("listening", () => {
    const address = server.address();
    if (address && typeof address === "object" && !isLoopbackAddress(address.address)) {
      arena.logger.error?.(`training arena: the server listens on ${address.address}; the training routes answer on loopback only`);
    }
  });
  server.on("close", () => {
    arena.close().catch(() => {});
  });
  server.trainingArena = arena;
  return arena;
}

/** Listens on a loopback address only; anything else is refused before a socket is opened. */
export function listenLoopback(server, port, host = "127.0.0.1") {
  if (!isLoopbackHostName(host) || host === "localhost") {
    return Promise.reject(new Error(`refusing to listen on ${host}: the Training Room binds loopback addresses only (127.0.0.1 or ::1)`));
  }
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host.replace(/^\[|\]$/g, ""), () => {
      server.off("error", reject);
      resolve(server.address());
    });
  });
}

/** A daemon of its own: the training routes on 127.0.0.1:port. */
export async function serveTrainingArena(options, port = 4777, host = "127.0.0.1") {
  const server = http.createServer();
  const arena = attachTrainingArena(server, options);
  await listenLoopback(server, port, host);
  return { server, arena };
}
