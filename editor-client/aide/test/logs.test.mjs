// Live logs (SSE with Last-Event-ID resume, keepalive, end then 204) and the
// daemon surviving an arena-ls crash, through a real arena-ls.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { makeWorkspace, startDaemon, request, post, openStream, waitFor, stopAll } from "./support.mjs";

let workspace;
let daemon;

before(async () => {
  workspace = makeWorkspace();
  // A small buffer, so that a reconnect after a gap must read old lines back from arena-ls.
  daemon = await startDaemon(workspace.root, { keepaliveMs: 200, bufferLines: 40 });
});

after(async () => {
  await stopAll(daemon.base).catch(() => {});
  await daemon.close();
  workspace.remove();
});

async function everyLine(runId) {
  const seqs = [];
  const texts = [];
  let since = -1;
  for (;;) {
    const { json } = await request(daemon.base, `/api/training/logs?since=${since}&format=json&runId=${runId}`);
    seqs.push(...json.lines.map((line) => line.seq));
    texts.push(...json.lines.map((line) => line.line));
    since = json.next;
    if (json.done) {
      return { seqs, texts };
    }
  }
}

test("SSE: a dropped connection resumed with Last-Event-ID loses no line and repeats none; end, then 204", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "fake", approved: true });
  assert.equal(started.status, 200, started.text);
  const runId = started.json.runId;

  const first = openStream(daemon.base, "/api/training/logs", { Origin: "http://127.0.0.1:4173" });
  await first.until("20 lines", (s) => s.lines().length >= 20);
  assert.equal(first.status, 200);
  assert.match(first.headers["content-type"], /^text\/event-stream/);
  assert.equal(first.headers["access-control-allow-origin"], "http://127.0.0.1:4173");
  first.close();
  const firstIds = first.lines().map((event) => Number(event.id));
  const lastSeen = firstIds[firstIds.length - 1];

  // The gap: the trainer goes on printing, well past what the daemon keeps in memory.
  await waitFor("100 more lines", async () => {
    const { json } = await request(daemon.base, `/api/training/logs?since=${lastSeen}&format=json&runId=${runId}&limit=200`);
    return json.lines.length >= 100;
  });

  const second = openStream(daemon.base, "/api/training/logs", { "Last-Event-ID": String(lastSeen) });
  await second.until("lines after the gap", (s) => s.lines().length >= 120);
  const stopped = await post(daemon.base, "/api/training/stop", {});
  assert.equal(stopped.status, 200, stopped.text);
  await second.until("event: end", (s) => s.events.some((event) => event.event === "end"));
  const end = second.events.find((event) => event.event === "end");
  assert.equal(end.data.status, "stopped");
  assert.equal(end.data.runId, runId);

  const secondIds = second.lines().map((event) => Number(event.id));
  const all = [...firstIds, ...secondIds];
  const whole = await everyLine(runId);
  assert.deepEqual(all, whole.seqs, "the two connections together are the whole log, in order, each line once");
  assert.deepEqual(all, [...Array(all.length).keys()]);
  const texts = [...first.lines(), ...second.lines()].map((event) => event.data.line);
  assert.deepEqual(texts, whole.texts);
  assert.ok(texts.some((text) => text === "stopped (by file)" || /stopped/.test(text)));

  // The browser reconnects after the end: 204 tells it to stop.
  const again = await request(daemon.base, "/api/training/logs", { headers: { "Last-Event-ID": String(all[all.length - 1]) } });
  assert.equal(again.status, 204);
  const pinned = await request(daemon.base, `/api/training/logs?runId=${runId}&since=${all[all.length - 1]}`);
  assert.equal(pinned.status, 204);
});

test("SSE: ?since=SEQ resumes like Last-Event-ID; a keepalive comment comes while the log is quiet", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "short", approved: true });
  assert.equal(started.status, 200, started.text);
  const runId = started.json.runId;
  await waitFor("the run to end", async () => (await request(daemon.base, "/api/training/status")).json.active === null);
  const whole = await everyLine(runId);
  const from = whole.seqs[10];
  const stream = openStream(daemon.base, `/api/training/logs?runId=${runId}&since=${from}`);
  await stream.until("event: end", (s) => s.events.some((event) => event.event === "end"));
  assert.deepEqual(
    stream.lines().map((event) => Number(event.id)),
    whole.seqs.filter((seq) => seq > from),
  );

  const live = await post(daemon.base, "/api/training/start", { id: "nockpt", approved: true });
  assert.equal(live.status, 200, live.text);
  const quiet = openStream(daemon.base, `/api/training/logs?runId=${live.json.runId}`);
  await quiet.until("a keepalive comment", (s) => s.events.some((event) => event.comments.includes("keepalive")));
  quiet.close();
  await post(daemon.base, "/api/training/stop", { confirm: true });
});

test("arena-ls killed with SIGKILL mid-run: the run goes on, a new arena-ls re-adopts it, the stream loses nothing", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "fake", approved: true });
  assert.equal(started.status, 200, started.text);
  const runId = started.json.runId;
  const stream = openStream(daemon.base, `/api/training/logs?runId=${runId}`);
  await stream.until("10 lines", (s) => s.lines().length >= 10);

  const client = daemon.arena.client;
  const oldPid = client.pid;
  const readyAgain = new Promise((resolve) => client.once("ready", resolve));
  process.kill(oldPid, "SIGKILL");
  await readyAgain;
  assert.notEqual(client.pid, oldPid);
  assert.equal(client.restarts, 1);

  const adopted = await waitFor("the run re-adopted and advancing", async () => {
    const { status, json } = await request(daemon.base, "/api/training/status");
    return status === 200 && json.active?.runId === runId && json.active.pid === started.json.pid ? json : null;
  });
  const stepThen = adopted.active.step;
  await waitFor("the step to advance after the restart", async () => (await request(daemon.base, "/api/training/status")).json.active?.step > stepThen);
  const seenBefore = stream.lines().length;
  await stream.until("more lines after the restart", (s) => s.lines().length > seenBefore + 20);

  const stopped = await post(daemon.base, "/api/training/stop", {});
  assert.equal(stopped.status, 200, stopped.text);
  assert.equal(stopped.json.runId, runId);
  assert.equal(stopped.json.status, "stopped");
  await stream.until("event: end", (s) => s.events.some((event) => event.event === "end"));
  const ids = stream.lines().map((event) => Number(event.id));
  assert.deepEqual(ids, (await everyLine(runId)).seqs, "every line across the crash, once, in order");
  assert.deepEqual(ids, [...Array(ids.length).keys()]);
});

test("while arena-ls is down the routes answer 503 (never hang), /health still answers", async () => {
  const client = daemon.arena.client;
  const down = new Promise((resolve) => client.once("down", resolve));
  const readyAgain = new Promise((resolve) => client.once("ready", resolve));
  process.kill(client.pid, "SIGKILL");
  await down;
  const answer = await request(daemon.base, "/api/training/status");
  // The restart waits out its backoff (500 ms at least), so this request finds no server.
  assert.equal(answer.status, 503);
  assert.match(answer.json.error, /arena-ls is not running/);
  await readyAgain;
  assert.equal((await request(daemon.base, "/api/training/status")).status, 200);
  assert.equal((await request(daemon.base, "/health")).json.ok, true);
});
