import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { isAnnouncement } from "../core/announcements";
import { LogRouter } from "../core/logRouter";
import type { LogLine } from "../core/protocol";
import { decide } from "../core/refusals";
import type { Operation } from "../core/refusals";
import { fmtSpan, lostLine } from "../core/workLost";

const NOW = new Date("2026-12-01T16:00:00.000Z");
const CHECKPOINT = { step: 600, path: "checkpoints/tiny-lm/ckpt_latest.pt", at: "2026-12-01T12:55:00.000Z", runId: "tiny-lm-1" };
const FINISHED_RUN = { runId: "tiny-lm-1", jobId: "tiny-lm", status: "succeeded", step: 600, totalSteps: 600, endedAt: "2026-12-01T15:48:00.000Z" };

describe("1012 already-finished", () => {
  it("says the job is finished, its step and when, and offers a start from step 0", () => {
    const start: Operation = { kind: "start", params: { id: "tiny-lm", approved: true, resume: true, startStep: 600 } };
    const decision = decide(start, { code: 1012, message: "finished", data: { reason: "already-finished", run: FINISHED_RUN } }, NOW);
    assert.deepEqual(decision, {
      kind: "confirm",
      prompt:
        "tiny-lm is finished: it trained all 600 steps in run tiny-lm-1 (ended 2026-12-01 15:48 UTC, 12 min ago). " +
        "Start over from step 0? The new run overwrites its checkpoints.",
      confirmLabel: "Start over from step 0",
      retry: { kind: "start", params: { id: "tiny-lm", approved: true, resume: false } },
    });
  });

  it("never asks again once the start is fresh", () => {
    const fresh: Operation = { kind: "start", params: { id: "tiny-lm", resume: false } };
    assert.equal(decide(fresh, { code: 1012, message: "finished", data: { run: FINISHED_RUN } }, NOW).kind, "error");
  });

  it("copes with a refusal without its run", () => {
    const decision = decide({ kind: "start", params: { id: "j" } }, { code: 1012, message: "finished" }, NOW);
    assert.equal(decision.kind, "confirm");
    assert.match(decision.kind === "confirm" ? decision.prompt : "", /^j is finished: it trained all its steps \(ended at an unknown time\)/);
  });
});

describe("1011 checkpoint-mismatch", () => {
  it("says the step asked for and the checkpoint's step and age, and retries with confirm", () => {
    const start: Operation = { kind: "start", params: { id: "tiny-lm", resume: true, startStep: 50 } };
    const data = { reason: "checkpoint-mismatch", asked: 50, lastCheckpoint: CHECKPOINT };
    const decision = decide(start, { code: 1011, message: "mismatch", data }, NOW);
    assert.deepEqual(decision, {
      kind: "confirm",
      prompt:
        "You asked to start tiny-lm at step 50, but its last checkpoint is step 600 " +
        "(checkpoints/tiny-lm/ckpt_latest.pt, saved 3 h 05 min ago by run tiny-lm-1). " +
        "A plain start resumes from step 600. Start at step 50 anyway?",
      confirmLabel: "Start at step 50",
      retry: { kind: "start", params: { id: "tiny-lm", resume: true, startStep: 50, confirm: true } },
    });
    const confirmed: Operation = { kind: "start", params: { id: "tiny-lm", startStep: 50, confirm: true } };
    assert.equal(decide(confirmed, { code: 1011, message: "mismatch", data }, NOW).kind, "error");
  });
});

describe("1007 with an old checkpoint", () => {
  it("says how much a stop loses since the checkpoint", () => {
    const stop: Operation = { kind: "stop", params: { runId: "r2", kill: true }, jobLabel: "tiny-lm" };
    const data = {
      reason: "no-checkpoint",
      runtimeSeconds: 1200,
      lastCheckpoint: { step: 300, path: "ckpt.pt", at: "2026-12-01T15:54:00.000Z" },
      lost: { steps: 90, seconds: 240 },
    };
    const decision = decide(stop, { code: 1007, message: "old checkpoint", data }, NOW);
    assert.equal(decision.kind, "confirm");
    if (decision.kind === "confirm") {
      assert.equal(
        decision.prompt,
        "This run's last checkpoint is step 300 (ckpt.pt, saved 6 min ago); stopping it now loses 90 steps (4 min) of training. Stop anyway?",
      );
      assert.deepEqual(decision.retry, { ...stop, params: { ...stop.params, confirm: true } });
    }
  });
});

describe("lost", () => {
  it("says what a stopped run lost", () => {
    const killed = { step: 390, stoppedBy: "kill", lastCheckpoint: { step: 300 }, lost: { steps: 90, seconds: 240 } };
    assert.equal(lostLine(killed), "killed at step 390; last checkpoint 300: 90 steps (4 min) lost");
    const saved = { step: 412, stoppedBy: "file", lastCheckpoint: { step: 412 }, lost: { steps: 0, seconds: 0 } };
    assert.equal(lostLine(saved), "stopped at step 412; nothing lost (checkpoint at step 412)");
    assert.equal(lostLine({ stoppedBy: "signal", lost: { steps: null, seconds: 95 } }), "stopped; no checkpoint: 2 min lost");
    assert.equal(lostLine({ step: 4, lost: null }), undefined);
    assert.equal(lostLine({ step: 4 }), undefined);
    assert.equal(lostLine(null), undefined);
  });

  it("reads spans at a glance", () => {
    assert.deepEqual([0, 59, 240, 3599, 7500].map(fmtSpan), ["0 s", "59 s", "4 min", "1 h 00 min", "2 h 05 min"]);
    assert.equal(fmtSpan(Number.NaN), "?");
    assert.equal(fmtSpan("5"), "?");
  });
});

describe("@arena announcements", () => {
  const line = (seq: number, text: string, stream: LogLine["stream"] = "stdout"): LogLine => ({ seq, stream, text });

  it("are hidden from the job's channel unless raw lines are shown", () => {
    const lines = [line(1, "step 10/600 loss 2.1"), line(2, '@arena {"event": "progress", "step": 10}'), line(3, "@arena not json")];
    const hidden = new LogRouter();
    hidden.remember({ runId: "r", jobId: "j" });
    assert.deepEqual(hidden.route("r", lines).texts, ["step 10/600 loss 2.1", "@arena not json"]);
    let raw = false;
    const toggled = new LogRouter(() => raw);
    raw = true;
    assert.deepEqual(toggled.route("r", lines).texts, lines.map((l) => l.text));
  });

  it("are only well-formed ones on stdout", () => {
    assert.equal(isAnnouncement(line(1, '@arena {"event": "health", "step": 1}')), true);
    assert.equal(isAnnouncement(line(1, '@arena {"event": "health"}', "stderr")), false);
    assert.equal(isAnnouncement(line(1, '@arena {"step": 1}')), false);
    assert.equal(isAnnouncement(line(1, '@arena ["event"]')), false);
    assert.equal(isAnnouncement(line(1, "@arena " + "[".repeat(100000))), false);
  });
});
