import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { runTooltip, statusReport } from "../core/format";
import { commitText, interruptedLine, newRebootOffers, rebootOffer, rebootOffers, recordLines } from "../core/laptop";
import type { AfterReboot, RunInfo } from "../core/protocol";

function interrupted(runId: string, afterReboot: Partial<AfterReboot> | null, jobId = "tiny-lm"): RunInfo {
  return {
    runId,
    jobId,
    status: "crashed",
    failure: { kind: "machine-restarted", evidence: "the machine restarted since the run started" },
    lastCheckpoint: { step: 500, path: "ckpt-500.pt" },
    afterReboot: afterReboot === null ? null : { policy: "ask", step: 500, offer: "Resume from step 500", ...afterReboot },
  };
}

describe("rebootOffer", () => {
  it("names the checkpoint's path beside the step when the server gives it (a {path} resume, contract 8.1)", () => {
    const offer = rebootOffer(interrupted("r1", { path: "out/checkpoint-500" }));
    assert.ok(offer);
    assert.equal(offer.label, "Resume from step 500");
    assert.match(offer.message, /Resume from step 500 \(its checkpoint out\/checkpoint-500\)\?$/);
    assert.deepEqual(offer.params, { id: "tiny-lm", resume: true, startStep: 500 });
    assert.match(rebootOffer(interrupted("r1", { path: null }))?.message ?? "", /Resume from step 500\?$/);
  });

  it("offers the server's Resume from step N as the button, and starts the job resumed at that step", () => {
    const offer = rebootOffer(interrupted("r1", {}));
    assert.ok(offer);
    assert.equal(offer.label, "Resume from step 500");
    assert.deepEqual(offer.params, { id: "tiny-lm", resume: true, startStep: 500 });
    assert.match(offer.message, /tiny-lm was interrupted by a restart of the machine \(run r1\)\. Resume from step 500\?/);
  });

  it("says why the server did not resume it by itself", () => {
    const offer = rebootOffer(interrupted("r1", { policy: "resume", problem: "pre-flight failed: power: on battery" }));
    assert.ok(offer);
    assert.match(offer.message, /not resumed by itself: pre-flight failed: power: on battery/);
  });

  it("offers nothing once resumed, superseded, with never, or for any other run", () => {
    assert.equal(rebootOffer(interrupted("r1", { offer: null, resumedBy: "r2" })), undefined);
    assert.equal(rebootOffer(interrupted("r1", { offer: null, newerRun: "r3" })), undefined);
    assert.equal(rebootOffer(interrupted("r1", { policy: "never", offer: null })), undefined);
    assert.equal(rebootOffer(interrupted("r1", null)), undefined);
    assert.equal(rebootOffer({ runId: "x", jobId: "tiny-lm", status: "running" }), undefined);
    assert.equal(rebootOffer(interrupted("r1", { step: null })), undefined);
  });
});

describe("newRebootOffers", () => {
  it("shows each run's offer once a session, newest first", () => {
    const shown = new Set<string>();
    const runs = [interrupted("old", {}), interrupted("new", {}, "other")];
    assert.deepEqual(
      newRebootOffers(runs, shown).map((offer) => offer.runId),
      ["new", "old"],
    );
    assert.deepEqual(newRebootOffers(runs, shown), []);
    assert.deepEqual(rebootOffers(runs).length, 2);
  });
});

describe("the run record", () => {
  it("shows the commit and whether it was dirty, or that there is no repository", () => {
    assert.equal(commitText({ git: { commit: "0123456789abcdef0123", dirty: false } }), "0123456789ab");
    assert.equal(commitText({ git: { commit: "0123456789abcdef0123", dirty: true, diffSha256: "f".repeat(64) } }), "0123456789ab (dirty)");
    assert.equal(commitText({ git: null }), undefined);
    assert.equal(commitText(undefined), undefined);
    const lines = recordLines({
      git: { commit: "abc", dirty: true, diffSha256: "d".repeat(64) },
      python: { path: "py -3.10 -E", version: "3.10" },
      host: "LAPTOP",
    });
    assert.deepEqual(lines, ["code: abc (dirty)", `uncommitted diff: sha256 ${"d".repeat(16)}`, "python: py -3.10 -E (3.10)", "host: LAPTOP"]);
    assert.deepEqual(recordLines({ git: null }), ["code: not in a git repository"]);
    assert.deepEqual(recordLines(null), []);
  });

  it("is in the run's hover, beside the restart's line", () => {
    const run = { ...interrupted("r1", {}), record: { git: { commit: "abc", dirty: false } } };
    const tooltip = runTooltip(run);
    assert.match(tooltip, /interrupted by a restart: Resume from step 500/);
    assert.match(tooltip, /code: abc/);
    assert.equal(interruptedLine(interrupted("r1", { offer: null, resumedBy: "r2" })), "interrupted by a restart; resumed as run r2");
  });

  it("lists the offers in the status report", () => {
    const report = statusReport({ active: null, runs: [interrupted("r1", {})], jobs: [], health: null });
    assert.match(report, /Interrupted by a restart of the machine:\n {2}tiny-lm \[r1\]: Resume from step 500/);
  });
});
