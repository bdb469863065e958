// The pure parts: what the panel and the daemon make of arena-ls's shapes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { LogBuffer, isRawLine, keepAwakeLine, keepAwakeReasonOf, lostText, offerStartBody, placeOf, recordText, stripAnsi as panelStrip, withResume } from "../training-room.js";
import { activeShape, interruptedShape, isLoopbackAddress, pageLine, parseCommand, runShape, statusLogLines, stripAnsi } from "../training-arena.mjs";

test("ANSI escapes are stripped (colours, cursor moves, OSC titles), text kept", () => {
  for (const strip of [stripAnsi, panelStrip]) {
    assert.equal(strip("\u001b[0;33mwarn\u001b[0m done"), "warn done");
    assert.equal(strip("\u001b[2K\u001b[1Gstep 5"), "step 5");
    assert.equal(strip("\u001b]0;title\u0007after"), "after");
    assert.equal(strip("<b>not markup</b>"), "<b>not markup</b>");
  }
  assert.equal(panelStrip("bell\u0007 and \u0008backspace"), "bell and backspace");
});

test("a blocking diagnostic is shown as its file relative to the workspace and its line from 1", () => {
  const diagnostic = { uri: "file:///work/space/trainers/my%20train.py", range: { start: { line: 11, character: 0 } } };
  assert.equal(placeOf(diagnostic, "/work/space"), "trainers/my train.py:12");
  assert.equal(placeOf({ uri: "file:///elsewhere/t.py" }, "/work/space"), "/elsewhere/t.py");
});

test("the panel says which checkpoint a run resumed from and why (contract 8.2)", () => {
  const resumedFrom = { step: 20, path: "ckpt-20.pt", verified: "sha256", skipped: [{ step: 40, path: "ckpt-40.pt", why: "is 3 bytes, 9 announced: torn or replaced" }] };
  assert.equal(
    withResume("last checkpoint: step 60", { resumedFrom }),
    "last checkpoint: step 60 · resumed from step 20 (ckpt-20.pt), verified by sha256 · skipped step 40 (ckpt-40.pt): is 3 bytes, 9 announced: torn or replaced",
  );
  assert.equal(withResume("no checkpoint yet", { resumedFrom: null }), "no checkpoint yet");
  const run = { runId: "r", jobId: "lm", status: "running", resumedFrom };
  assert.deepEqual(activeShape(run).resumedFrom, resumedFrom, "the daemon's status route passes it on");
  assert.deepEqual(runShape(run).resumedFrom, resumedFrom);
});

test("what a stop lost, in words; null is unknown unless the checkpoint is at the stop's step", () => {
  assert.equal(lostText({ steps: 0, seconds: 0 }), "no work lost (the stop saved a checkpoint)");
  assert.equal(lostText({ steps: 120, seconds: 95 }), "work lost: 120 steps (2m) since the last checkpoint");
  assert.equal(lostText(null, 64, 64), "no work lost (checkpoint at the last step)");
  assert.equal(lostText(null, 64, 50), "work lost: unknown");
  assert.equal(lostText(undefined), "work lost: unknown");
});

test("log lines for the page: stderr prefixed `stderr: `, escapes stripped, seq kept", () => {
  assert.deepEqual(pageLine("tiny-lm", { seq: 7, stream: "stderr", text: "\u001b[31moops\u001b[0m", at: "t" }), { id: "tiny-lm", line: "stderr: oops", at: "t", seq: 7, stream: "stderr" });
  assert.equal(pageLine("j", { seq: 1, stream: "stdout", text: "x" }).line, "x");
});

test("status.active is null unless the run is live; runShape keeps an ended run's outcome", () => {
  const run = { runId: "r", jobId: "j", status: "running", pid: 5, step: 3, totalSteps: 10, loss: 1.5, etaSeconds: 9 };
  assert.deepEqual(Object.keys(activeShape(run)).slice(0, 8), ["id", "name", "status", "pid", "runId", "step", "totalSteps", "loss"]);
  assert.equal(activeShape({ ...run, status: "crashed" }), null);
  assert.equal(activeShape(null), null);
  const ended = runShape({ ...run, status: "stopped", stoppedBy: "battery", exitCode: 0 });
  assert.equal(ended.stoppedBy, "battery");
  assert.equal(ended.lost, null);
});

test("loopback addresses and the --arena-ls argument list", () => {
  for (const address of ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"]) {
    assert.equal(isLoopbackAddress(address), true, address);
  }
  for (const address of ["0.0.0.0", "192.0.2.2", "::", "::ffff:10.0.0.1", "localhost", undefined]) {
    assert.equal(isLoopbackAddress(address), false, String(address));
  }
  assert.deepEqual(parseCommand("py -3.10 -m arena_ls"), ["py", "-3.10", "-m", "arena_ls"]);
  assert.deepEqual(parseCommand('["C:\\\\Program Files\\\\arena-ls.exe"]'), ["C:\\Program Files\\arena-ls.exe"]);
  assert.throws(() => parseCommand("   "), /empty/);
  assert.throws(() => parseCommand("[1]"), /list of strings/);
});

test("the 1007 question says the run's runtime as every client does: seconds for a young run, never a rounded-up minute", async () => {
  const { httpError } = await import("../training-arena.mjs");
  const refused = (runtimeSeconds) => httpError({ code: 1007, message: "no checkpoint", data: { reason: "no-checkpoint", runtimeSeconds } }, "stop").body.error;
  assert.equal(refused(3.2), "This run has no checkpoint yet; stopping it now loses 3 s of training. Stop anyway?");
  assert.equal(refused(0), "This run has no checkpoint yet; stopping it now loses 0 s of training. Stop anyway?");
  assert.equal(refused(720), "This run has no checkpoint yet; stopping it now loses 12 min of training. Stop anyway?");
  assert.match(refused(undefined), /loses all of its training/);
});

test("one wording: the bundled core says what the terminal client says (tests/editor/fixtures/wording_cases.json)", async () => {
  const core = await import("../lib/core.mjs");
  const fixture = JSON.parse(readFileSync(new URL("../../../tests/editor/fixtures/wording_cases.json", import.meta.url), "utf8"));
  const now = new Date(fixture.now);
  const functions = {
    span: (seconds) => core.fmtSpan(seconds),
    checkpoint: (checkpoint) => core.checkpointWords(checkpoint, now),
    finishedPrompt: (job, run) => core.finishedPrompt(job, run, now),
    mismatchPrompt: (job, data) => core.mismatchPrompt(job, data, now),
    stopPrompt: (data) => core.stopQuestion(data, now),
    lostLine: (run) => core.lostLine(run),
    stoppedNotice: (run) => core.stoppedNotice(run),
    keepAwakeText: (run, reason) => core.keepAwakeText(run, reason ?? undefined),
    rebootOffer: (run) => core.rebootOffer(run)?.message.replace(/^Arena: /, ""),
  };
  assert.ok(fixture.cases.length >= 30);
  for (const [index, item] of fixture.cases.entries()) {
    assert.equal(functions[item.fn](...item.args) ?? null, item.text, `case ${index} (${item.fn})`);
  }
});

test("the panel's raw lines are the core's well-formed @arena announcements; look-alikes stay readable", () => {
  assert.equal(isRawLine({ stream: "stdout", line: '@arena {"event":"progress","step":10}' }), true);
  assert.equal(isRawLine({ stream: "stdout", line: '@arena {"event":"health","gpu":null}' }), true);
  for (const line of ['@arena {"step":10}', "@arena {not json", "@arena [1]", '@arena "event"', '@arena{"event":"x"}', ' @arena {"event":"x"}', "step 10/3000 loss 2.1", "— run ended: stopped"]) {
    assert.equal(isRawLine({ stream: "stdout", line }), false, line);
  }
  assert.equal(isRawLine({ stream: "stderr", line: 'stderr: @arena {"event":"progress"}' }), false, "stderr is never an announcement");
  assert.equal(isRawLine({ stream: "end", line: '@arena {"event":"x"}' }), false);
  assert.equal(isRawLine({ stream: "stdout", line: `@arena {"event":"x","pad":"${"a".repeat(70000)}"}` }), false, "too long to be one");
  assert.equal(isRawLine(undefined), false);
});

test("the log buffer: raw lines hidden keeps the newest readable lines; raw lines shown keeps the newest of all; it stays bounded", () => {
  const buffer = new LogBuffer(4);
  const add = (seq, raw) => buffer.add({ seq, raw });
  for (let seq = 0; seq < 30; seq += 1) {
    add(seq, seq % 3 !== 0);
  }
  assert.deepEqual(buffer.shown(false).map((entry) => entry.seq), [18, 21, 24, 27]);
  assert.deepEqual(buffer.shown(true).map((entry) => entry.seq), [26, 27, 28, 29]);
  for (let seq = 30; seq < 1000; seq += 1) {
    add(seq, true);
    assert.ok(buffer.entries.length <= 3 * 4, `bounded: ${buffer.entries.length}`);
  }
  assert.deepEqual(buffer.shown(false).map((entry) => entry.seq), [18, 21, 24, 27], "a flood of announcements does not push readable lines out");
  assert.deepEqual(buffer.shown(true).map((entry) => entry.seq), [996, 997, 998, 999]);
  buffer.clear();
  assert.deepEqual(buffer.shown(true), []);
});

test("status.logs skips the trainer's announcements (a person reads its last line), unless they are all there is", () => {
  const lines = [
    { seq: 0, stream: "stdout", text: "step 10/3000 loss 2.1" },
    { seq: 1, stream: "stdout", text: '@arena {"event":"progress","step":10}' },
    { seq: 2, stream: "stdout", text: "@arena {looks like one}" },
    { seq: 3, stream: "stderr", text: '@arena {"event":"health"}' },
    { seq: 4, stream: "stdout", text: '@arena {"event":"health"}' },
  ];
  assert.deepEqual(statusLogLines(lines, 100).map((line) => line.seq), [0, 2, 3]);
  assert.deepEqual(statusLogLines(lines, 2).map((line) => line.seq), [2, 3]);
  const onlyRaw = [lines[1], lines[4]];
  assert.deepEqual(statusLogLines(onlyRaw, 100).map((line) => line.seq), [1, 4]);
  assert.deepEqual(statusLogLines([], 100), []);
});

test("a run a restart of the machine interrupted is offered for resume, and the run record's commit shown (contract 8.3)", () => {
  const interrupted = (runId, afterReboot) => ({
    runId,
    jobId: "tiny-lm",
    status: "crashed",
    failure: { kind: "machine-restarted", evidence: "the machine restarted since the run started" },
    afterReboot: { policy: "ask", step: 500, offer: "Resume from step 500", resumedBy: null, newerRun: null, problem: null, ...afterReboot },
  });
  const offers = interruptedShape([interrupted("old", {}), { runId: "x", jobId: "j", status: "succeeded" }, interrupted("new", { problem: "pre-flight failed" })]);
  assert.deepEqual(
    offers.map((offer) => [offer.runId, offer.id, offer.offer, offer.startStep]),
    [
      ["new", "tiny-lm", "Resume from step 500", 500],
      ["old", "tiny-lm", "Resume from step 500", 500],
    ],
  );
  assert.equal(offers[1].message, "tiny-lm was interrupted by a restart of the machine (run old). Resume from step 500?");
  assert.match(offers[0].message, /not resumed by itself: pre-flight failed/);
  assert.deepEqual(interruptedShape([interrupted("done", { offer: null, resumedBy: "r2" }), interrupted("never", { policy: "never", offer: null })]), []);
  assert.deepEqual(offerStartBody(offers[1]), { id: "tiny-lm", approved: true, resume: true, startStep: 500 });
  const ended = runShape(interrupted("old", {}));
  assert.equal(ended.afterReboot.offer, "Resume from step 500");
  const record = { git: { commit: "0123456789abcdef", dirty: true, diffSha256: "f".repeat(64) }, python: { path: "py -3.10 -E", version: "3.10" } };
  assert.equal(recordText(runShape({ ...interrupted("old", {}), record })), "code: 0123456789ab (dirty)");
  assert.equal(recordText(activeShape({ runId: "r", jobId: "j", status: "running", record: { git: null } })), "code: not in a git repository");
  assert.equal(recordText(activeShape({ runId: "r", jobId: "j", status: "running" })), "");
  assert.equal(recordText(null), "");
});

test("the panel says whether the active run keeps the machine awake, in every client's words (contract 8.3)", () => {
  const running = (fields) => activeShape({ runId: "r", jobId: "j", status: "running", ...fields });
  assert.equal(keepAwakeLine(running({ keepAwake: true })), "keeping the machine awake");
  assert.equal(keepAwakeLine(running({ keepAwake: false })), "not keeping the machine awake");
  assert.equal(keepAwakeLine(running({ keepAwake: null })), "", "not decided yet, or no line: nothing is claimed");
  assert.equal(keepAwakeLine(running({ keepAwake: null }), "no system bus"), "the machine may sleep: no system bus");
  assert.equal("keepAwake" in running({}), false, "a server that does not say: nothing is claimed");
  assert.equal(keepAwakeLine(running({})), "");
  assert.equal(keepAwakeLine(null), "");
  const said = { id: "j", line: "the machine cannot be kept awake during this run: no system bus", stream: "arena", seq: 3 };
  assert.equal(keepAwakeReasonOf(said), "no system bus");
  assert.equal(keepAwakeReasonOf({ ...said, stream: "stdout" }), undefined, "a trainer's print is not the agent's word");
  assert.equal(keepAwakeReasonOf({ id: "j", line: "started", stream: "arena" }), undefined);
});
