import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { JobInfo, RunInfo } from "../core/protocol";
import { lastCheckpointOf, resumeOffer, startParamsFor } from "../core/resume";

const tiny: JobInfo = { id: "tiny-lm", name: "Tiny LM", kind: "train", status: "ready", runnable: true };

function run(runId: string, jobId: string, step: number | null, totalSteps = 600): RunInfo {
  return {
    runId,
    jobId,
    status: "succeeded",
    totalSteps,
    lastCheckpoint: step === null ? null : { step, path: `ckpt-${step}.pt` },
  };
}

describe("lastCheckpointOf", () => {
  it("takes the newest run of the job that announced a checkpoint", () => {
    const runs = [run("a", "tiny-lm", 200), run("b", "other", 50), run("c", "tiny-lm", 600), run("d", "tiny-lm", null)];
    assert.deepEqual(lastCheckpointOf("tiny-lm", runs), { step: 600, totalSteps: 600, path: "ckpt-600.pt" });
    assert.deepEqual(lastCheckpointOf("other", runs), { step: 50, totalSteps: 600, path: "ckpt-50.pt" });
    assert.equal(lastCheckpointOf("nobody", runs), undefined);
  });
});

describe("resumeOffer", () => {
  it("offers nothing without a checkpoint, or for a task", () => {
    assert.equal(resumeOffer(tiny, []), undefined);
    assert.equal(resumeOffer(tiny, [run("a", "tiny-lm", null)]), undefined);
    assert.equal(resumeOffer({ ...tiny, kind: "task" }, [run("a", "tiny-lm", 100)]), undefined);
  });

  it("puts Start fresh first for a finished job, and says a resume trains nothing", () => {
    const offer = resumeOffer(tiny, [run("a", "tiny-lm", 600)]);
    assert.ok(offer);
    assert.equal(offer.finished, true);
    assert.deepEqual(offer.labels, ["Start fresh", "Resume from step 600"]);
    assert.match(offer.prompt, /Tiny LM has finished: its checkpoint is at step 600 of 600/);
  });

  it("puts the resume first for a job stopped half way", () => {
    const offer = resumeOffer(tiny, [run("a", "tiny-lm", 240)]);
    assert.ok(offer);
    assert.equal(offer.finished, false);
    assert.deepEqual(offer.labels, ["Resume from step 240", "Start fresh"]);
    assert.match(offer.prompt, /checkpoint at step 240 of 600/);
  });
});

describe("resumeOffer of a job resumed from the checkpoint's path (contract 8.1)", () => {
  const hf: JobInfo = { ...tiny, resumesFromPath: true };

  it("names the path in the button and the question, where the step alone would mislead", () => {
    const offer = resumeOffer(hf, [{ ...run("a", "tiny-lm", 240), lastCheckpoint: { step: 240, path: "out/checkpoint-240" } }]);
    assert.ok(offer);
    assert.deepEqual(offer.labels, ["Resume from step 240 (out/checkpoint-240)", "Start fresh"]);
    assert.match(offer.prompt, /Tiny LM has a checkpoint at step 240 of 600 \(out\/checkpoint-240\)\. Resume from it/);
    assert.deepEqual(startParamsFor("tiny-lm", offer, offer.resumeLabel), { id: "tiny-lm", resume: true, startStep: 240 });
  });

  it("names it for a finished job too, and keeps the step alone for a {step} job or a path never announced", () => {
    const done = resumeOffer(hf, [run("a", "tiny-lm", 600)]);
    assert.ok(done);
    assert.deepEqual(done.labels, ["Start fresh", "Resume from step 600 (ckpt-600.pt)"]);
    assert.match(done.prompt, /its checkpoint is at step 600 of 600 \(ckpt-600\.pt\), so resuming trains nothing/);
    assert.equal(resumeOffer({ ...tiny, resumesFromPath: false }, [run("a", "tiny-lm", 240)])?.resumeLabel, "Resume from step 240");
    const noPath = resumeOffer(hf, [{ ...run("a", "tiny-lm", 240), lastCheckpoint: { step: 240, path: "" } }]);
    assert.equal(noPath?.resumeLabel, "Resume from step 240");
  });
});

describe("startParamsFor", () => {
  const offer = resumeOffer(tiny, [run("a", "tiny-lm", 240)]);

  it("starts fresh with resume: false, resumes from the step it showed", () => {
    assert.deepEqual(startParamsFor("tiny-lm", offer, "Start fresh"), { id: "tiny-lm", resume: false });
    assert.deepEqual(startParamsFor("tiny-lm", offer, "Resume from step 240"), { id: "tiny-lm", resume: true, startStep: 240 });
  });

  it("starts nothing when the question was dismissed, and asks nothing without an offer", () => {
    assert.equal(startParamsFor("tiny-lm", offer, undefined), undefined);
    assert.deepEqual(startParamsFor("tiny-lm", undefined, undefined), { id: "tiny-lm" });
  });
});
