// Every route of contract 7.4 and every refusal, through a real arena-ls.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { makeWorkspace, startDaemon, request, post, openStream, waitFor, stopAll, PAGE_ORIGIN, ARENA_LS, TEST_SETTINGS } from "./support.mjs";
import { attachTrainingArena, httpError, Messages, TrainingArena } from "../training-arena.mjs";
import { finishedOffer } from "../training-room.js";

let workspace;
let daemon;

before(async () => {
  workspace = makeWorkspace();
  daemon = await startDaemon(workspace.root);
});

after(async () => {
  await stopAll(daemon.base).catch(() => {});
  await daemon.close();
  workspace.remove();
});

test("GET /health answers ok with arena-ls's version and the workspace", async () => {
  const answer = await request(daemon.base, "/health");
  assert.equal(answer.status, 200);
  assert.equal(answer.json.ok, true);
  assert.equal(typeof answer.json.arena.version, "string");
  assert.equal(answer.json.arena.workspace, workspace.root);
});

test("GET /api/training/status when idle: active null, the manifest's jobs, health, last 100 logs", async () => {
  const answer = await request(daemon.base, "/api/training/status");
  assert.equal(answer.status, 200);
  assert.equal(answer.json.active, null);
  assert.ok(Array.isArray(answer.json.logs));
  const ids = answer.json.jobs.map((job) => job.id);
  assert.deepEqual(ids, ["fake", "nockpt", "short", "crashy", "gated", "off", "needs-probe", "no-such-exe"]);
  for (const job of answer.json.jobs) {
    assert.deepEqual(Object.keys(job).slice(0, 5), ["id", "name", "kind", "status", "runnable"]);
    assert.ok(Array.isArray(job.blockedBy));
  }
  assert.equal(typeof answer.json.health.ram.totalMb, "number");
  assert.ok("battery" in answer.json.health);
});

test("a gated trainer is listed not runnable with its reasons, each with file and line", async () => {
  const { json } = await request(daemon.base, "/api/training/status");
  const gated = json.jobs.find((job) => job.id === "gated");
  assert.equal(gated.runnable, false);
  assert.ok(gated.blockedBy.length >= 1);
  for (const reason of gated.blockedBy) {
    assert.match(reason.code, /^AR\d{3}$/);
    assert.match(reason.uri, /gated_train\.py$/);
    assert.equal(typeof reason.range.start.line, "number");
  }
});

test("start without approved: 400 explicit training approval required", async () => {
  for (const body of [{ id: "fake" }, { id: "fake", approved: "true" }, { id: "fake", approved: 1 }]) {
    const answer = await post(daemon.base, "/api/training/start", body);
    assert.equal(answer.status, 400);
    assert.equal(answer.json.error, Messages.approval);
  }
  assert.equal((await request(daemon.base, "/api/training/status")).json.active, null);
});

test("start of an unknown id: 404 training job is not allowlisted", async () => {
  for (const id of ["nope", "../etc/passwd", "", "x".repeat(500)]) {
    const answer = await post(daemon.base, "/api/training/start", { id, approved: true });
    assert.equal(answer.status, 404, `${id.slice(0, 20)}: ${answer.text}`);
    assert.equal(answer.json.error, Messages.unknown);
  }
});

test("start of a gated trainer: 422 with the diagnostics (1004)", async () => {
  const answer = await post(daemon.base, "/api/training/start", { id: "gated", approved: true });
  assert.equal(answer.status, 422);
  assert.equal(answer.json.reason, "gates-failed");
  assert.match(answer.json.error, /AR00\d/);
  assert.ok(answer.json.diagnostics.length >= 1);
});

test("start of a disabled job: 409 disabled (1008)", async () => {
  const answer = await post(daemon.base, "/api/training/start", { id: "off", approved: true });
  assert.equal(answer.status, 409);
  assert.equal(answer.json.reason, "disabled");
  assert.equal(answer.json.error, "training job is disabled in the manifest");
});

test("start of a job that needs a VRAM probe: 428 probe-required (1010)", async () => {
  const answer = await post(daemon.base, "/api/training/start", { id: "needs-probe", approved: true });
  assert.equal(answer.status, 428);
  assert.equal(answer.json.reason, "probe-required");
});

test("start of a job whose executable is missing: 500, never a 'running' that is not", async () => {
  const answer = await post(daemon.base, "/api/training/start", { id: "no-such-exe", approved: true });
  assert.equal(answer.status, 500);
  assert.notEqual(answer.json.status, "running");
  assert.match(answer.json.error, /crashed|could not be started/);
});

test("bad start fields: 400 naming the field", async () => {
  const cases = [
    [{ id: "fake", approved: true, startStep: "ten" }, /startStep/],
    [{ id: "fake", approved: true, resume: "yes" }, /resume/],
    [{ id: "fake", approved: true, confirm: "yes" }, /confirm/],
    [{ id: "fake", approved: true, fresh: "yes" }, /fresh/],
    [{ id: "fake", approved: true, fresh: true, resume: true }, /fresh/],
  ];
  for (const [body, field] of cases) {
    const answer = await post(daemon.base, "/api/training/start", body);
    assert.equal(answer.status, 400);
    assert.match(answer.json.error, field);
  }
});

test("start, status while running, second start 409, stop with the checkpoint step and tail", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "fake", approved: true });
  assert.equal(started.status, 200, started.text);
  assert.equal(started.json.id, "fake");
  assert.equal(started.json.status, "running");
  assert.equal(typeof started.json.pid, "number");
  assert.match(started.json.runId, /^fake-/);

  const again = await post(daemon.base, "/api/training/start", { id: "short", approved: true });
  assert.equal(again.status, 409);
  assert.equal(again.json.error, Messages.busy);

  const running = await waitFor("a checkpoint and progress in status", async () => {
    const { json } = await request(daemon.base, "/api/training/status");
    return json.active?.lastCheckpoint && json.active.step > 5 && json.logs.length > 5 ? json : null;
  });
  assert.equal(running.active.id, "fake");
  assert.equal(running.active.runId, started.json.runId);
  assert.equal(running.active.pid, started.json.pid);
  assert.equal(running.active.totalSteps, 100000);
  assert.equal(typeof running.active.loss, "number");
  for (const key of ["etaSeconds", "stepsPerSecond"]) {
    assert.ok(key in running.active);
  }
  const line = running.logs[running.logs.length - 1];
  assert.deepEqual(Object.keys(line).slice(0, 4), ["id", "line", "at", "seq"]);
  assert.equal(line.id, "fake");

  const stopped = await post(daemon.base, "/api/training/stop", {});
  assert.equal(stopped.status, 200, stopped.text);
  assert.equal(stopped.json.status, "stopped");
  assert.equal(stopped.json.id, "fake");
  assert.equal(stopped.json.exitCode, 0);
  assert.equal(stopped.json.stoppedBy, "file");
  assert.ok("lost" in stopped.json);
  assert.ok(stopped.json.lost === null || typeof stopped.json.lost.steps === "number");
  assert.equal(typeof stopped.json.lastCheckpoint.step, "number");
  assert.ok(stopped.json.tail.length > 0);
  assert.ok(stopped.json.tail.every((text) => typeof text === "string"));

  const after = await request(daemon.base, "/api/training/status");
  assert.equal(after.json.active, null);
  assert.equal(after.json.lastRun.status, "stopped");
  assert.equal(after.json.lastRun.runId, started.json.runId);

  const idle = await post(daemon.base, "/api/training/stop", {});
  assert.deepEqual(idle.json, { status: "idle" });
});

test("stop of a run with no checkpoint: 409 no-checkpoint (1007) saying how much is lost; confirm stops it", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "nockpt", approved: true });
  assert.equal(started.status, 200, started.text);
  await waitFor("the run to be running", async () => (await request(daemon.base, "/api/training/status")).json.active?.status === "running");
  const refused = await post(daemon.base, "/api/training/stop", {});
  assert.equal(refused.status, 409);
  assert.equal(refused.json.reason, "no-checkpoint");
  assert.equal(refused.json.code, 1007);
  assert.match(refused.json.error, /no checkpoint yet; stopping it now loses (\d+ (s|min)|less than 1 s) of training/);
  assert.equal(typeof refused.json.runtimeSeconds, "number");
  assert.equal((await request(daemon.base, "/api/training/status")).json.active?.runId, started.json.runId, "the refusal stopped nothing");

  const stopped = await post(daemon.base, "/api/training/stop", { confirm: true });
  assert.equal(stopped.status, 200, stopped.text);
  assert.equal(stopped.json.status, "stopped");
});

test("stop with kill: the tree is killed and stoppedBy says so", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "fake", approved: true });
  assert.equal(started.status, 200, started.text);
  await waitFor("a checkpoint", async () => (await request(daemon.base, "/api/training/status")).json.active?.lastCheckpoint);
  const stopped = await post(daemon.base, "/api/training/stop", { kill: true });
  assert.equal(stopped.status, 200, stopped.text);
  assert.equal(stopped.json.stoppedBy, "kill");
  assert.equal(stopped.json.status, "stopped");
});

test("a crash is reported: lastRun crashed with its exit code, and the stream ends with it", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "crashy", approved: true });
  assert.equal(started.status, 200, started.text);
  const stream = openStream(daemon.base, `/api/training/logs?runId=${started.json.runId}`);
  await stream.until("event: end", (s) => s.events.some((event) => event.event === "end"));
  const end = stream.events.find((event) => event.event === "end");
  assert.equal(end.data.status, "crashed");
  assert.equal(end.data.exitCode, 1);
  const { json } = await request(daemon.base, "/api/training/status");
  assert.equal(json.active, null);
  assert.equal(json.lastRun.status, "crashed");
  assert.equal(json.lastRun.exitCode, 1);
  assert.ok(json.lastRun.failure?.kind);
  assert.ok(json.logs.some((line) => /TRAINING_CRASHED: crashy/.test(line.line)));
});

test("the JSON tail pages through a whole run in order: ?since=SEQ&format=json → {lines, next, done}", async () => {
  const started = await post(daemon.base, "/api/training/start", { id: "short", approved: true });
  assert.equal(started.status, 200, started.text);
  const runId = started.json.runId;
  await waitFor("the run to end", async () => (await request(daemon.base, "/api/training/status")).json.active === null);
  const seen = [];
  let since = -1;
  for (;;) {
    const { status, json } = await request(daemon.base, `/api/training/logs?since=${since}&format=json&limit=7&runId=${runId}`);
    assert.equal(status, 200);
    seen.push(...json.lines.map((line) => line.seq));
    assert.ok(json.lines.length <= 7);
    since = json.next;
    if (json.done) {
      break;
    }
  }
  assert.deepEqual(seen, [...Array(seen.length).keys()], "every seq from 0, once, in order");
  const last = await request(daemon.base, `/api/training/logs?since=${since}&format=json&runId=${runId}`);
  assert.deepEqual(last.json.lines, []);
  assert.equal(last.json.done, true);
  const bad = await request(daemon.base, "/api/training/logs?since=abc&format=json");
  assert.equal(bad.status, 400);
});

test("start of a finished job: 409 already-finished (1012) with the question; the SOP's plain start keeps the 409; fresh: true starts over", async () => {
  // The JSON-tail test above ran "short" through all its steps.
  await waitFor("short to have finished", async () => {
    const { json } = await request(daemon.base, "/api/training/status");
    return json.active === null && json.lastRun?.id === "short" && json.lastRun.status === "succeeded";
  });
  for (const body of [{ id: "short", approved: true }, { id: "short", approved: true, resume: true, startStep: 30 }]) {
    const refused = await post(daemon.base, "/api/training/start", body);
    assert.equal(refused.status, 409, refused.text);
    assert.equal(refused.json.reason, "already-finished");
    assert.equal(refused.json.code, 1012);
    assert.match(refused.json.error, /^the job has already finished: .*finished all its 30 steps/);
    assert.match(refused.json.question, /^short is finished: it trained all 30 steps in run short-\S+ \(ended .+\)\. Start over from step 0\? The new run overwrites its checkpoints\.$/);
  }
  assert.equal((await request(daemon.base, "/api/training/status")).json.active, null, "the refusals started nothing");
  // Issue 38: the panel offers "Resume" only when resuming can train something: the job says it finished.
  const finished = (await request(daemon.base, "/api/training/status")).json.jobs.find((job) => job.id === "short");
  assert.equal(finished.finished, true, JSON.stringify(finished));
  assert.equal(finished.totalSteps, 30);
  const offer = finishedOffer(finished);
  assert.deepEqual(offer.labels, ["Start fresh"], "no Resume on a finished job");
  assert.match(offer.prompt, /^fake short is finished: it trained all 30 steps in run short-\S+ \(ended \d{4}-\d\d-\d\d \d\d:\d\d UTC, .+ ago\)\. Start over from step 0\? The new run overwrites its checkpoints\.$/);
  const notFinished = (await request(daemon.base, "/api/training/status")).json.jobs.find((job) => job.id === "fake");
  assert.equal(notFinished.finished, false);
  const fresh = await post(daemon.base, "/api/training/start", { id: "short", approved: true, fresh: true });
  assert.equal(fresh.status, 200, fresh.text);
  assert.equal(fresh.json.id, "short");
  await waitFor("the fresh run to end", async () => (await request(daemon.base, "/api/training/status")).json.lastRun?.runId === fresh.json.runId && (await request(daemon.base, "/api/training/status")).json.active === null);
  const { json } = await request(daemon.base, "/api/training/status");
  assert.equal(json.lastRun.status, "succeeded");
  assert.equal(json.lastRun.step, 30, "it trained from step 0 again, all its steps");
});

test("wrong methods get 405, unknown training paths 404, and other paths go to the daemon's own handler", async () => {
  assert.equal((await request(daemon.base, "/api/training/start")).status, 405);
  assert.equal((await post(daemon.base, "/api/training/status", {})).status, 405);
  assert.equal((await request(daemon.base, "/api/training/nothing")).status, 404);

  const own = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/plain" });
    res.end(`aide's own route ${req.url}`);
  });
  const arena = new TrainingArena({ workspace: workspace.root, arenaLs: [ARENA_LS], settings: TEST_SETTINGS, origins: [PAGE_ORIGIN], health: false });
  attachTrainingArena(own, arena);
  await new Promise((resolve) => own.listen(0, "127.0.0.1", resolve));
  try {
    await arena.ready();
    const base = `http://127.0.0.1:${own.address().port}`;
    assert.equal((await request(base, "/api/models")).text, "aide's own route /api/models");
    assert.equal((await request(base, "/health")).text, "aide's own route /health");
    assert.equal((await request(base, "/api/training/status", { token: arena.token })).status, 200);
  } finally {
    await new Promise((resolve) => own.close(resolve));
    await arena.close();
  }
});

test("refusals 1011 and 1012 (added to the server in parallel) map to 409 with their data", () => {
  const mismatch = httpError({ code: 1011, message: "step 7 is not the last checkpoint (500)", data: { reason: "checkpoint-mismatch", asked: 7, lastCheckpoint: { step: 500 } } });
  assert.equal(mismatch.status, 409);
  assert.equal(mismatch.body.reason, "checkpoint-mismatch");
  assert.equal(mismatch.body.asked, 7);
  const finished = httpError({ code: 1012, message: "finished", data: { reason: "already-finished", run: { runId: "r", jobId: "j", status: "succeeded" } } });
  assert.equal(finished.status, 409);
  assert.equal(finished.body.run.status, "succeeded");
  assert.equal(httpError({ code: -32602, message: "field `id`: bad" }).status, 400);
  const asked = httpError({ code: 1011, message: "m", data: { reason: "checkpoint-mismatch", asked: 7, lastCheckpoint: { step: 500, at: new Date().toISOString(), runId: "r-1" } } }, "start", "lm");
  assert.match(asked.body.question, /^You asked to start lm at step 7, but its last checkpoint is step 500 \(saved \d+ s ago by run r-1\)\. A plain start resumes from step 500\. Start at step 7 anyway\?$/);
});

test("1007 of a run whose checkpoint is old (7.3): 409 no-checkpoint whose question says the checkpoint and how much is lost", () => {
  const at = new Date(Date.now() - 45_000).toISOString();
  const old = httpError({ code: 1007, message: "run r: the last checkpoint (step 50) is 45s old", data: { reason: "no-checkpoint", lastCheckpoint: { step: 50, path: "ckpt.pt", at }, lost: { steps: 42, seconds: 45 }, cadenceSeconds: 20 } }, "stop");
  assert.equal(old.status, 409);
  assert.equal(old.body.reason, "no-checkpoint");
  assert.deepEqual(old.body.lost, { steps: 42, seconds: 45 });
  assert.equal(old.body.lastCheckpoint.step, 50);
  assert.equal(old.body.cadenceSeconds, 20);
  assert.match(old.body.error, /^This run's last checkpoint is step 50 \(ckpt\.pt, saved (45|46) s ago\); stopping it now loses 42 steps \(45 s\) of training\. Stop anyway\?$/);
  assert.doesNotMatch(old.body.error, /no checkpoint yet/);
});

test("start refused by a pre-flight check: 412 with the checks (1005)", async () => {
  const strict = await startDaemon(workspace.root, { settings: { ...TEST_SETTINGS, preflight: { ...TEST_SETTINGS.preflight, minFreeRamMb: 100_000_000 } } });
  try {
    const answer = await post(strict.base, "/api/training/start", { id: "fake", approved: true });
    assert.equal(answer.status, 412, answer.text);
    assert.equal(answer.json.reason, "preflight-failed");
    assert.ok(answer.json.checks.some((check) => check.ok === false));
    assert.match(answer.json.error, /^pre-flight check failed: /);
  } finally {
    await strict.close();
  }
});

test("start with a manifest that does not load: 422 invalid-manifest (1006)", async () => {
  const broken = makeWorkspace();
  const { writeFileSync } = await import("node:fs");
  writeFileSync(`${broken.root}/training/manifest.json`, '{"version": 1, "jobs": [ {"id": "fake",');
  const other = await startDaemon(broken.root);
  try {
    const answer = await post(other.base, "/api/training/start", { id: "fake", approved: true });
    assert.equal(answer.status, 422, answer.text);
    assert.equal(answer.json.reason, "invalid-manifest");
  } finally {
    await other.close();
    broken.remove();
  }
});
