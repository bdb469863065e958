// The daemon's trust boundary (issue 39): the page's secret on every route that
// changes or reads anything, the peer's account on Linux, and log followers
// that a flood of made-up run ids cannot multiply.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { makeWorkspace, startDaemon, request, post, PAGE_ORIGIN } from "./support.mjs";
import { MAX_FOLLOWERS, RUN_ID_SHAPE } from "../training-arena.mjs";
import { addressBytes, peerUid, procAddressBytes, tokenMatches, uidInProcTable } from "../lib/trust.mjs";

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

const START = JSON.stringify({ id: "fake", approved: true });
const ROUTES = [
  ["GET", "/api/training/status"],
  ["GET", "/api/training/logs?format=json"],
  ["GET", "/api/training/logs"],
  ["POST", "/api/training/start", START],
  ["POST", "/api/training/stop", JSON.stringify({ kill: true, confirm: true })],
];

async function followers() {
  const { json } = await request(daemon.base, "/health", { token: null });
  return json.arena.followers;
}

test("without the page's secret every route but /health is 403, whatever the Origin (none, the page's, another)", async () => {
  const wrong = daemon.arena.token.replace(/.$/, (last) => (last === "A" ? "B" : "A"));
  for (const token of [null, "", wrong, "x", daemon.arena.token.slice(0, 10)]) {
    for (const origin of [undefined, PAGE_ORIGIN, "http://evil.example", "null"]) {
      for (const [method, path, body] of ROUTES) {
        const headers = { "Content-Type": "application/json", ...(origin ? { Origin: origin } : {}), ...(token !== null ? { "X-Arena-Token": token } : {}) };
        const answer = await request(daemon.base, path, { method, body, headers, token: null });
        assert.equal(answer.status, 403, `${method} ${path} origin ${origin} token ${JSON.stringify(token)}`);
      }
    }
  }
  const status = await request(daemon.base, "/api/training/status");
  assert.equal(status.status, 200);
  assert.equal(status.json.active, null, "a request without the secret started a run");
  const health = await request(daemon.base, "/health", { token: null });
  assert.equal(health.status, 200, "/health (liveness, no run details) needs no secret");
});

test("the page's own origin without the secret reads the refusal (CORS), so the panel can say reload", async () => {
  const answer = await request(daemon.base, "/api/training/status", { headers: { Origin: PAGE_ORIGIN }, token: null });
  assert.equal(answer.status, 403);
  assert.equal(answer.json.reason, "token-required");
  assert.equal(answer.headers["access-control-allow-origin"], PAGE_ORIGIN);
});

test("an <img>-style GET (no Origin, no secret, cookies irrelevant) of the log route is refused and follows nothing", async () => {
  const before = await followers();
  for (let index = 0; index < 50; index++) {
    const answer = await request(daemon.base, `/api/training/logs?runId=fake-20260101T000000-${index.toString(16).padStart(6, "0")}`, { token: null, headers: { Accept: "image/avif,image/webp,*/*" } });
    assert.equal(answer.status, 403);
  }
  assert.equal(await followers(), before);
});

test("the secret in the query is taken for a GET (EventSource), never for a POST", async () => {
  const token = encodeURIComponent(daemon.arena.token);
  assert.equal((await request(daemon.base, `/api/training/logs?format=json&token=${token}`, { token: null })).status, 200);
  const answer = await request(daemon.base, `/api/training/stop?token=${token}`, { method: "POST", body: "{}", headers: { "Content-Type": "application/json" }, token: null });
  assert.equal(answer.status, 403);
  const preflight = await request(daemon.base, "/api/training/start", { method: "OPTIONS", headers: { Origin: PAGE_ORIGIN, "Access-Control-Request-Headers": "content-type,x-arena-token" }, token: null });
  assert.equal(preflight.status, 204);
  assert.match(preflight.headers["access-control-allow-headers"], /X-Arena-Token/);
});

test("unknown or malformed run ids are 404 before anything is followed", async () => {
  const before = await followers();
  for (const runId of ["..", ".", "-", "_", "CON", "con", "../../etc", "fake", "fake-20260101T000000-abcdef", "FAKE-20260101T000000-abcdef", "x".repeat(300)]) {
    for (const format of ["&format=json", ""]) {
      const answer = await request(daemon.base, `/api/training/logs?runId=${encodeURIComponent(runId)}${format}`);
      assert.equal(answer.status, 404, `runId ${JSON.stringify(runId)} ${format}`);
      assert.equal(answer.json.reason, "unknown-run");
    }
  }
  assert.equal(await followers(), before);
  assert.ok(RUN_ID_SHAPE.test("tiny-lm-20261206T014623-a1b2c3"));
});

test("followers are shared per run and capped: one per run, at most MAX_FOLLOWERS, 503 when all are read", async () => {
  const arena = daemon.arena;
  const ids = [];
  for (let index = 0; index < MAX_FOLLOWERS + 5; index++) {
    const runId = `ghost-20260101T000000-${index.toString(16).padStart(6, "0")}`;
    arena.runs.set(runId, { runId, jobId: "ghost", status: "stopped" });
    ids.push(runId);
  }
  try {
    assert.equal(arena.follower(ids[0]), arena.follower(ids[0]), "one follower per run");
    for (const runId of ids) {
      arena.follower(runId);
      assert.ok(arena.followerCount <= MAX_FOLLOWERS, `${arena.followerCount} followers`);
    }
    // Every follower held by a reader: a new run's log is refused, not followed.
    for (const follower of arena.followers.values()) {
      follower.subscribers += 1;
    }
    const extra = "ghost-20260101T000000-ffffff";
    arena.runs.set(extra, { runId: extra, jobId: "ghost", status: "stopped" });
    assert.throws(() => arena.follower(extra), (error) => error.status === 503);
    for (const follower of arena.followers.values()) {
      follower.subscribers -= 1;
    }
  } finally {
    for (const runId of [...ids, "ghost-20260101T000000-ffffff"]) {
      arena.followers.get(runId)?.close();
      arena.followers.delete(runId);
      arena.runs.delete(runId);
    }
  }
});

test("a finished run's follower goes when its last reader leaves", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "short", approved: true });
  assert.equal(started.status, 200, JSON.stringify(started.json));
  const runId = started.json.runId;
  let done = false;
  for (let round = 0; round < 2000 && !done; round++) {
    const page = await request(daemon.base, `/api/training/logs?format=json&runId=${runId}&since=-1&limit=5000`);
    assert.equal(page.status, 200);
    done = page.json.done;
    if (!done) {
      await daemon.arena.followers.get(runId)?.changed(1000);
    }
  }
  assert.ok(done, "the short run ended");
  // Kept among the few finished logs (FOLLOWERS_KEPT), never polling: its loop has returned.
  const follower = daemon.arena.followers.get(runId);
  assert.ok(follower === undefined || (follower.done && follower.subscribers === 0));
});

test("the peer's uid is read from /proc/net/tcp for the client's end of the connection", async (t) => {
  const table = [
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
    "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0",
    "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1",
    "   2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  4242        0 3 1 0000000000000000 20 4 30 10 -1",
    "   3: 0200007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0000000000000000 20 4 30 10 -1",
  ].join("\n");
  assert.equal(uidInProcTable(table, { address: "127.0.0.1", port: 0xd431, peerAddress: "127.0.0.1", peerPort: 0x1f90 }), 4242);
  assert.equal(uidInProcTable(table, { address: "127.0.0.2", port: 0xd431, peerAddress: "127.0.0.1", peerPort: 0x1f90 }), 1000);
  assert.equal(uidInProcTable(table, { address: "::ffff:127.0.0.1", port: 0xd431, peerAddress: "127.0.0.1", peerPort: 0x1f90 }), 4242);
  assert.equal(uidInProcTable(table, { address: "127.0.0.1", port: 0xd432, peerAddress: "127.0.0.1", peerPort: 0x1f90 }), undefined);
  assert.deepEqual(procAddressBytes("00000000000000000000000001000000"), addressBytes("::1"));
  assert.deepEqual(procAddressBytes("0000000000000000FFFF00000100007F"), addressBytes("127.0.0.1"));
  assert.equal(addressBytes("nonsense"), null);
  assert.equal(await peerUid({}, { platform: "win32" }), null, "where the OS does not tell, nothing is claimed");
  if (process.platform !== "linux") {
    t.skip("not Linux: /proc/net/tcp is not there");
    return;
  }
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const accepted = new Promise((resolve) => server.once("connection", resolve));
    const client = net.connect(server.address().port, "127.0.0.1");
    const socket = await accepted;
    assert.equal(await peerUid(socket), process.getuid(), "our own connection is ours");
    client.destroy();
    socket.destroy();
  } finally {
    server.close();
  }
});

test("the secret is compared as a whole (no prefix, no other length)", () => {
  assert.equal(tokenMatches("abc", "abc"), true);
  assert.equal(tokenMatches("ab", "abc"), false);
  assert.equal(tokenMatches("abcd", "abc"), false);
  assert.equal(tokenMatches("", ""), false);
  assert.equal(tokenMatches(undefined, "abc"), false);
});
