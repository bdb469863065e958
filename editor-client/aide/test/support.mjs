// Shared by the Node tests: a temporary workspace with a manifest of small
// jobs (the repo's fake trainer), a real arena-ls from the checkout's .venv,
// HTTP and SSE helpers, and waiting with a deadline (never sleep and hope).
import http from "node:http";
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { serveTrainingArena } from "../training-arena.mjs";

export const AIDE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const REPO = path.resolve(AIDE, "..", "..");
export const ARENA_LS = process.env.ARENA_LS_BIN ?? path.join(REPO, ".venv", "bin", "arena-ls");
export const PAGE_ORIGIN = "http://127.0.0.1:4173";
export const WAIT_MS = 90_000;

/** Each daemon's page secret by base URL: the helpers send it as the owner's page does (`token: null` sends none). */
const TOKENS = new Map();

export function tokenFor(base) {
  return TOKENS.get(new URL(base).origin);
}

function withToken(base, headers, token) {
  const secret = token === undefined ? tokenFor(base) : token;
  return secret ? { "X-Arena-Token": secret, ...headers } : { ...headers };
}

/** Settings that let a test start a run on a loaded CI machine with no battery and no GPU. */
export const TEST_SETTINGS = {
  preflight: { minFreeRamMb: 0, requirePluggedIn: false, minFreeDiskMb: 0, gpuContention: "off" },
  watchdog: { stallSeconds: 600 },
};

const RESUME = { args: ["--resume", "--start-step", "{step}"] };

function fake(id, args, extra = {}) {
  return {
    id,
    name: `fake ${id}`,
    kind: "train",
    command: "{python}",
    args: ["trainers/fake_trainer.py", ...args],
    script: "trainers/fake_trainer.py",
    status: "ready",
    resume: RESUME,
    stop: { method: "file", graceSeconds: 30 },
    restart: { maxRestarts: 0, backoffSeconds: 1 },
    ...extra,
  };
}

/** A trainer with none of the SOP's safety: every error-severity gate fires on it. */
const GATED_TRAINER = `import torch

model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    opt.step()
`;

export function makeWorkspace({ jobs } = {}) {
  const root = mkdtempSync(path.join(os.tmpdir(), "aide-arena-"));
  mkdirSync(path.join(root, "trainers"));
  mkdirSync(path.join(root, "training"));
  cpSync(path.join(REPO, "tests", "fixtures", "trainers", "fake_trainer.py"), path.join(root, "trainers", "fake_trainer.py"));
  writeFileSync(path.join(root, "trainers", "gated_train.py"), GATED_TRAINER);
  const manifest = {
    version: 1,
    jobs: jobs ?? [
      fake("fake", ["--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", "--numbered"]),
      fake("nockpt", ["--steps", "100000", "--interval", "0.05"]),
      fake("short", ["--steps", "30", "--interval", "0.02", "--ckpt-every", "10", "--numbered"]),
      fake("crashy", ["--steps", "1000", "--interval", "0.02", "--ckpt-every", "5", "--crash-at", "15"]),
      { id: "gated", name: "gated trainer", kind: "train", command: "{python}", args: ["trainers/gated_train.py"], script: "trainers/gated_train.py", status: "ready", resume: RESUME },
      fake("off", ["--steps", "10"], { status: "disabled" }),
      fake("needs-probe", ["--steps", "10"], { probe: { args: ["--steps", "2"], maxVramMb: 5120, required: true } }),
      { id: "no-such-exe", name: "missing executable", kind: "task", command: path.join(root, "bin", "missing-exe"), args: [], status: "ready" },
    ],
  };
  writeFileSync(path.join(root, "training", "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  return { root, remove: () => rmSync(root, { recursive: true, force: true }) };
}

/** A daemon of the training routes on 127.0.0.1:<free port>, over a real arena-ls. */
export async function startDaemon(workspace, options = {}) {
  if (!existsSync(ARENA_LS)) {
    throw new Error(`${ARENA_LS} is missing: run scripts/bootstrap.sh first`);
  }
  const logger = { error: (text) => process.env.AIDE_TEST_VERBOSE && process.stderr.write(`${text}\n`) };
  const { server, arena } = await serveTrainingArena(
    { workspace, arenaLs: [ARENA_LS], settings: TEST_SETTINGS, origins: [PAGE_ORIGIN], logger, ...options },
    0,
  );
  await arena.ready();
  const port = server.address().port;
  TOKENS.set(`http://127.0.0.1:${port}`, arena.token);
  return {
    server,
    arena,
    port,
    base: `http://127.0.0.1:${port}`,
    async close() {
      await new Promise((resolve) => {
        server.close(resolve);
        server.closeAllConnections?.();
      });
      await arena.close();
    },
  };
}

/** One HTTP request; the answer's status, headers and body (parsed when JSON). */
export function request(base, pathName, { method = "GET", headers = {}, body, host, token } = {}) {
  const url = new URL(pathName, base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: host ?? url.hostname, port: url.port, path: `${url.pathname}${url.search}`, method, headers: withToken(base, headers, token) },
      (res) => {
        const chunks = [];
        res.on("data", (chunk) => chunks.push(chunk));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let json;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode, headers: res.headers, text, json });
        });
      },
    );
    req.on("error", reject);
    if (body !== undefined) {
      req.write(body);
    }
    req.end();
  });
}

export function post(base, pathName, value, headers = {}, token = undefined) {
  return request(base, pathName, {
    method: "POST",
    token,
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof value === "string" ? value : JSON.stringify(value),
  });
}

/** Waits for `check()` to return something truthy, polling; fails after `ms` with `what`. */
export async function waitFor(what, check, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await check();
    } catch (error) {
      last = error;
    }
    if (last && !(last instanceof Error)) {
      return last;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * An SSE connection: `events` fills as they arrive ({event, id, data, comment}).
 * `until(predicate)` waits for an event; `close()` drops the connection.
 */
export function openStream(base, pathName, headers = {}, token = undefined) {
  const url = new URL(pathName, base);
  const stream = { events: [], status: undefined, headers: undefined, ended: false, _waiters: [] };
  const notify = () => {
    for (const waiter of [...stream._waiters]) {
      waiter();
    }
  };
  stream.response = new Promise((resolve, reject) => {
    const req = http.get({ host: url.hostname, port: url.port, path: `${url.pathname}${url.search}`, headers: withToken(base, headers, token) }, (res) => {
      stream.status = res.statusCode;
      stream.headers = res.headers;
      resolve(res);
      res.setEncoding("utf8");
      let pending = "";
      res.on("data", (chunk) => {
        pending += chunk;
        let index;
        while ((index = pending.indexOf("\n\n")) >= 0) {
          const block = pending.slice(0, index);
          pending = pending.slice(index + 2);
          const event = { event: "message", id: undefined, data: undefined, comments: [] };
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) {
              event.comments.push(line.slice(1).trim());
            } else if (line.startsWith("event: ")) {
              event.event = line.slice(7);
            } else if (line.startsWith("id: ")) {
              event.id = line.slice(4);
            } else if (line.startsWith("data: ")) {
              event.data = JSON.parse(line.slice(6));
            } else if (line.startsWith("retry: ")) {
              event.retry = Number(line.slice(7));
            }
          }
          stream.events.push(event);
        }
        notify();
      });
      res.on("end", () => {
        stream.ended = true;
        notify();
      });
      res.on("close", () => {
        stream.ended = true;
        notify();
      });
    });
    req.on("error", (error) => {
      stream.ended = true;
      notify();
      reject(error);
    });
    stream.request = req;
  });
  stream.lines = () => stream.events.filter((event) => event.event === "line");
  stream.until = (what, predicate, ms = WAIT_MS) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out waiting for ${what} (${stream.events.length} events)`));
      }, ms);
      const check = () => {
        if (predicate(stream)) {
          cleanup();
          resolve(stream);
        } else if (stream.ended) {
          cleanup();
          reject(new Error(`the stream ended before ${what}`));
        }
      };
      const cleanup = () => {
        clearTimeout(timer);
        stream._waiters.splice(stream._waiters.indexOf(check), 1);
      };
      stream._waiters.push(check);
      check();
    });
  stream.close = () => stream.request?.destroy();
  return stream;
}

/** Stops whatever runs (confirming, so no test leaves a run behind). */
export async function stopAll(base) {
  await post(base, "/api/training/stop", { confirm: true });
}
