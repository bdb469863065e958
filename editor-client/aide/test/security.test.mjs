// A loopback HTTP server in a browser world: each attack as a real request.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import { makeWorkspace, startDaemon, request, post, tokenFor, PAGE_ORIGIN, ARENA_LS, TEST_SETTINGS } from "./support.mjs";
import { TrainingArena, attachTrainingArena, listenLoopback } from "../training-arena.mjs";

let workspace;
let daemon;

before(async () => {
  workspace = makeWorkspace();
  daemon = await startDaemon(workspace.root);
});

after(async () => {
  await post(daemon.base, "/api/training/stop", { confirm: true }).catch(() => {});
  await daemon.close();
  workspace.remove();
});

async function nothingRuns() {
  const { json } = await request(daemon.base, "/api/training/status");
  assert.equal(json.active, null, "the attack started a run");
}

const START = JSON.stringify({ id: "fake", approved: true });

test("a foreign page's origin is refused on every route, with no CORS header", async () => {
  for (const origin of ["http://evil.example", "http://127.0.0.1:4174", "null", "https://127.0.0.1:4173", "http://localhost:4173"]) {
    for (const [method, path, body] of [
      ["GET", "/api/training/status"],
      ["GET", "/api/training/logs"],
      ["GET", "/health"],
      ["POST", "/api/training/start", START],
      ["POST", "/api/training/stop", "{}"],
    ]) {
      const answer = await request(daemon.base, path, { method, body, headers: { Origin: origin, "Content-Type": "application/json" } });
      assert.equal(answer.status, 403, `${origin} ${method} ${path}`);
      assert.equal(answer.headers["access-control-allow-origin"], undefined);
      assert.equal(answer.json.error, "origin not allowed");
    }
  }
  await nothingRuns();
});

test("the page's own origin gets its origin back (never a wildcard), and preflights only for it", async () => {
  const answer = await request(daemon.base, "/api/training/status", { headers: { Origin: PAGE_ORIGIN } });
  assert.equal(answer.status, 200);
  assert.equal(answer.headers["access-control-allow-origin"], PAGE_ORIGIN);
  assert.match(answer.headers.vary, /Origin/);
  const plain = await request(daemon.base, "/api/training/status");
  assert.notEqual(plain.headers["access-control-allow-origin"], "*");

  const preflight = await request(daemon.base, "/api/training/start", {
    method: "OPTIONS",
    headers: { Origin: PAGE_ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type" },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers["access-control-allow-origin"], PAGE_ORIGIN);
  assert.match(preflight.headers["access-control-allow-methods"], /POST/);
  assert.match(preflight.headers["access-control-allow-headers"], /Content-Type/);

  const foreign = await request(daemon.base, "/api/training/start", {
    method: "OPTIONS",
    headers: { Origin: "http://evil.example", "Access-Control-Request-Method": "POST" },
  });
  assert.equal(foreign.status, 403);
  assert.equal(foreign.headers["access-control-allow-origin"], undefined);
});

test("DNS rebinding: a Host that is not this loopback socket is refused", async () => {
  for (const host of [`evil.example:${daemon.port}`, "evil.example", `127.0.0.1:${daemon.port + 1}`, `127.0.0.1.evil.example:${daemon.port}`, `[::1]:1`]) {
    for (const [method, path, body] of [
      ["GET", "/api/training/status"],
      ["POST", "/api/training/start", START],
    ]) {
      const answer = await request(daemon.base, path, { method, body, headers: { Host: host, "Content-Type": "application/json" } });
      assert.equal(answer.status, 403, `Host ${JSON.stringify(host)} ${method} ${path}`);
      assert.match(answer.json.error, /Host/);
    }
  }
  // No Host at all (HTTP/1.0, written by hand: Node's client always adds one).
  const raw = await new Promise((resolve, reject) => {
    const socket = net.connect(daemon.port, "127.0.0.1", () => socket.end("GET /api/training/status HTTP/1.0\r\n\r\n"));
    let text = "";
    socket.on("data", (chunk) => (text += chunk));
    socket.on("end", () => resolve(text));
    socket.on("error", reject);
  });
  assert.match(raw, /^HTTP\/1\.[01] 403/);
  for (const host of [`127.0.0.1:${daemon.port}`, `localhost:${daemon.port}`, `LOCALHOST:${daemon.port}`]) {
    assert.equal((await request(daemon.base, "/api/training/status", { headers: { Host: host } })).status, 200, host);
  }
  await nothingRuns();
});

test("simple-request CSRF: a POST that is not application/json gets 415 and starts nothing", async () => {
  for (const type of ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json-seq", undefined]) {
    const headers = type ? { "Content-Type": type } : {};
    const answer = await request(daemon.base, "/api/training/start", { method: "POST", body: START, headers });
    assert.equal(answer.status, 415, String(type));
    assert.equal(answer.json.error, "the body must be application/json");
    const stop = await request(daemon.base, "/api/training/stop", { method: "POST", body: "{}", headers });
    assert.equal(stop.status, 415);
  }
  await nothingRuns();
  const charset = await request(daemon.base, "/api/training/start", { method: "POST", body: JSON.stringify({ id: "nope", approved: true }), headers: { "Content-Type": "application/json; charset=utf-8" } });
  assert.equal(charset.status, 404, "application/json with a charset is JSON");
});

test("bounded bodies: over 64 KiB is 413 (declared or streamed), bad JSON is 400, nothing starts", async () => {
  const big = JSON.stringify({ id: "fake", approved: true, pad: "x".repeat(70 * 1024) });
  const declared = await post(daemon.base, "/api/training/start", big);
  assert.equal(declared.status, 413);

  const streamed = await new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port: daemon.port, path: "/api/training/start", method: "POST", headers: { "Content-Type": "application/json", "Transfer-Encoding": "chunked", "X-Arena-Token": tokenFor(daemon.base) } },
      (res) => {
        const chunks = [];
        res.on("data", (chunk) => chunks.push(chunk));
        res.on("end", () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }));
      },
    );
    req.on("error", reject);
    for (let index = 0; index < 80; index++) {
      req.write("x".repeat(1024));
    }
    req.end();
  });
  assert.equal(streamed.status, 413);

  for (const body of ["{not json", "[1,2]", "null", '"text"']) {
    const answer = await post(daemon.base, "/api/training/start", body);
    assert.equal(answer.status, 400, body);
  }
  await nothingRuns();
});

test("nothing listens on a non-loopback address: listenLoopback refuses, and a request that arrives on one is refused", async (t) => {
  for (const host of ["0.0.0.0", "::", "192.168.1.10", "localhost", "evil.example"]) {
    const server = http.createServer();
    await assert.rejects(listenLoopback(server, 0, host), /loopback/);
    assert.equal(server.listening, false);
  }
  const external = Object.values(os.networkInterfaces())
    .flat()
    .find((entry) => entry && entry.family === "IPv4" && !entry.internal);
  if (!external) {
    t.skip("no non-loopback IPv4 interface on this machine: the request through one is not tried");
    return;
  }
  // AIDE's own server bound to every address by mistake: the training routes still answer loopback only.
  const server = http.createServer();
  const arena = new TrainingArena({ workspace: workspace.root, arenaLs: [ARENA_LS], settings: TEST_SETTINGS, origins: [PAGE_ORIGIN] });
  attachTrainingArena(server, arena);
  await new Promise((resolve) => server.listen(0, "0.0.0.0", resolve));
  try {
    await arena.ready();
    const port = server.address().port;
    const answer = await request(`http://${external.address}:${port}`, "/api/training/status", { headers: { Host: `127.0.0.1:${port}` } });
    assert.equal(answer.status, 403);
    assert.match(answer.json.error, /loopback/);
    assert.equal(net.isIP(external.address), 4);
    const local = await request(`http://127.0.0.1:${port}`, "/api/training/status", { token: arena.token });
    assert.equal(local.status, 200);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await arena.close();
  }
});
