#!/usr/bin/env node
// The stand-in of AIDE's daemon (contract 7.4): the training routes on
// 127.0.0.1:PORT through training-arena.mjs, and a page with the Training Room
// panel on 127.0.0.1:UI-PORT.
//
//   node editor-client/aide/demo/daemon.mjs --workspace . [--port 4777] [--ui-port 4173] [--arena-ls CMD]
//       [--settings JSON]   arena-ls settings (section `arena`), e.g. '{"preflight": {"minFreeRamMb": 1024}}'
//       [--token-file PATH] where the page's secret is written, mode 0600 (default
//                           WORKSPACE/.aide/training/aide-token); an owner-only file
//                           there already is reused, so an open page survives a restart
//
// The page gets the routes' secret in its HTML (docs/security.md, "The AIDE
// daemon"); the owner's scripts (verify-gates.sh) read it from the token file.
// Prints `listening on http://127.0.0.1:PORT` once both servers are up and
// arena-ls has answered `initialize`. Ctrl-C stops the daemon and arena-ls;
// a run goes on in its job agent, and the next daemon re-adopts it.
import http from "node:http";
import { lstat, readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { TrainingArena, attachTrainingArena, defaultArenaCommand, isLoopbackAddress, listenLoopback, parseCommand } from "../training-arena.mjs";
import { newToken, peerIsOwner, writeTokenFile } from "../lib/trust.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const AIDE = path.resolve(HERE, "..");

/** The page's files, and nothing else: the UI server serves this list only. */
const PAGE_FILES = {
  "/": { file: path.join(HERE, "index.html"), type: "text/html; charset=utf-8" },
  "/index.html": { file: path.join(HERE, "index.html"), type: "text/html; charset=utf-8" },
  "/training-room.js": { file: path.join(AIDE, "training-room.js"), type: "text/javascript; charset=utf-8" },
  "/training-room.css": { file: path.join(AIDE, "training-room.css"), type: "text/css; charset=utf-8" },
  "/lib/core.mjs": { file: path.join(AIDE, "lib", "core.mjs"), type: "text/javascript; charset=utf-8" },
  "/lib/room-parts.mjs": { file: path.join(AIDE, "lib", "room-parts.mjs"), type: "text/javascript; charset=utf-8" },
};

function usage(message) {
  process.stderr.write(`${message}\nusage: node editor-client/aide/demo/daemon.mjs --workspace DIR [--port 4777] [--ui-port 4173] [--arena-ls CMD] [--settings JSON] [--token-file PATH]\n`);
  process.exit(2);
}

function port(text, name) {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0 || value > 65535) {
    usage(`--${name} must be a port number (0 to 65535)`);
  }
  return value;
}

function options() {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        workspace: { type: "string" },
        port: { type: "string", default: "4777" },
        "ui-port": { type: "string", default: "4173" },
        "arena-ls": { type: "string" },
        settings: { type: "string" },
        "token-file": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (error) {
    usage(error.message);
  }
  if (parsed.help) {
    usage("The stand-in of AIDE's daemon: the Training Room's routes and page.");
  }
  if (!parsed.workspace) {
    usage("--workspace is required");
  }
  let settings = {};
  if (parsed.settings) {
    try {
      settings = JSON.parse(parsed.settings);
    } catch (error) {
      usage(`--settings is not JSON: ${error.message}`);
    }
  }
  const workspace = path.resolve(parsed.workspace);
  return {
    workspace,
    tokenFile: path.resolve(parsed["token-file"] ?? path.join(workspace, ".aide", "training", "aide-token")),
    port: port(parsed.port, "port"),
    uiPort: port(parsed["ui-port"], "ui-port"),
    arenaLs: parsed["arena-ls"] ? parseCommand(parsed["arena-ls"]) : defaultArenaCommand(),
    settings,
  };
}

/**
 * The token file's secret when it is one this account wrote for an earlier
 * daemon (a plain file, owner-only, ours); else a fresh secret, written there.
 */
async function pageToken(file) {
  try {
    const info = await lstat(file);
    const ours = info.isFile() && (info.mode & 0o077) === 0 && (process.getuid === undefined || info.uid === process.getuid());
    const kept = ours ? (await readFile(file, "utf8")).trim() : "";
    if (/^[A-Za-z0-9_-]{43}$/.test(kept)) {
      return kept;
    }
  } catch {
    // none yet
  }
  const token = newToken();
  await writeTokenFile(file, token);
  return token;
}

/** The page is only for this daemon's own loopback address (DNS rebinding) and, where the OS tells, its own account. */
async function pageRefusal(req) {
  const host = String(req.headers.host ?? "").toLowerCase();
  const match = /^(\[[0-9a-f:.]+\]|[^:]+)(?::(\d+))?$/.exec(host);
  const name = match?.[1]?.replace(/^\[|\]$/g, "");
  if (!match || !(name === "localhost" || isLoopbackAddress(name)) || Number(match[2] ?? 80) !== req.socket.localPort) {
    return "Host is not this page's loopback address";
  }
  if ((await peerIsOwner(req.socket)) === false) {
    return "another account's request: the Training Room answers its owner's account only";
  }
  return null;
}

/** The page's server; `page.apiOrigin` (where the page finds the routes) is known once the API listens. */
function uiServer(page) {
  return http.createServer(async (req, res) => {
    const apiOrigin = page.apiOrigin;
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const refusal = await pageRefusal(req);
    if (refusal) {
      res.writeHead(403, { "Content-Type": "text/plain" });
      res.end(refusal);
      return;
    }
    const entry = req.method === "GET" ? PAGE_FILES[url.pathname] : undefined;
    if (!entry) {
      res.writeHead(404, { "Content-Type": "text/plain" });
      res.end("not found");
      return;
    }
    let body = await readFile(entry.file, "utf8");
    if (entry.file.endsWith("index.html")) {
      // The secret goes with the HTML only: no CORS header here, so no other origin can read it.
      body = body.replace("__ARENA_API__", apiOrigin).replace("__ARENA_TOKEN__", page.token);
    }
    res.writeHead(200, {
      "Content-Type": entry.type,
      "Cache-Control": "no-store",
      // frame-ancestors: no other page frames this one to click its buttons (it holds the secret).
      "Content-Security-Policy": `default-src 'self'; connect-src ${apiOrigin}; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'`,
      "X-Frame-Options": "DENY",
      "Referrer-Policy": "no-referrer",
      "X-Content-Type-Options": "nosniff",
    });
    res.end(body);
  });
}

async function main() {
  const config = options();
  const api = http.createServer();
  const page = { apiOrigin: "", token: await pageToken(config.tokenFile) };
  const ui = uiServer(page);
  const uiAddress = await listenLoopback(ui, config.uiPort);
  const pageOrigin = `http://127.0.0.1:${uiAddress.port}`;
  const arena = new TrainingArena({ workspace: config.workspace, arenaLs: config.arenaLs, settings: config.settings, origins: [pageOrigin], token: page.token });
  attachTrainingArena(api, arena);
  const apiAddress = await listenLoopback(api, config.port);
  const apiOrigin = `http://127.0.0.1:${apiAddress.port}`;
  page.apiOrigin = apiOrigin;
  const untilReady = ({ code, signal, stderr }) => {
    process.stderr.write(`arena-ls (${config.arenaLs.join(" ")}) exited before it was ready (code ${code}, signal ${signal}); retrying.\n${stderr.slice(-5).join("\n")}\n`);
  };
  arena.client.on("down", untilReady);
  await arena.ready();
  arena.client.off("down", untilReady);
  process.stderr.write(`page: ${pageOrigin}/ (arena-ls: ${config.arenaLs.join(" ")}; workspace ${config.workspace})\n`);
  process.stderr.write(`token file: ${config.tokenFile}\n`);
  process.stdout.write(`listening on ${apiOrigin}\n`);
  let stopping = false;
  const stop = async () => {
    if (stopping) {
      return;
    }
    stopping = true;
    await arena.close().catch(() => {});
    ui.close();
    api.close();
    process.exit(0);
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

main().catch((error) => {
  process.stderr.write(`daemon: ${error?.stack ?? error}\n`);
  process.exit(1);
});
