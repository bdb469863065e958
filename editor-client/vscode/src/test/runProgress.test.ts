import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { runStatusText } from "../core/format";
import type { RunInfo } from "../core/protocol";
import { applyProgressMessage, parseDuration, runIdOfToken, runToShow } from "../core/runProgress";

const run: RunInfo = { runId: "tiny-lm-20261130T120000-abc123", jobId: "tiny-lm", status: "running", step: 100, totalSteps: 600, loss: 3.1 };

describe("runIdOfToken", () => {
  it("reads the run id out of the server's token", () => {
    assert.equal(runIdOfToken("arena-tiny-lm-20261130T120000-abc123-fe638a03"), "tiny-lm-20261130T120000-abc123");
    assert.equal(runIdOfToken("other-token"), undefined);
    assert.equal(runIdOfToken(42), undefined);
  });
});

describe("parseDuration", () => {
  it("reads the server's durations", () => {
    assert.equal(parseDuration("45s"), 45);
    assert.equal(parseDuration("9m"), 540);
    assert.equal(parseDuration("1h05m"), 3900);
    assert.equal(parseDuration(""), undefined);
    assert.equal(parseDuration("soon"), undefined);
  });
});

describe("applyProgressMessage", () => {
  it("takes the step, total, loss, speed and ETA of the latest report", () => {
    const next = applyProgressMessage(run, "step 120/600 · loss 2.31 · 3.2 it/s · ETA 9m · GPU 3100 MB 87%");
    assert.equal(runStatusText(next), "⟳ tiny-lm 120/600 (20%) · loss 2.31 · ETA 9m");
    assert.equal(next.stepsPerSecond, 3.2);
    assert.equal(run.step, 100, "the run it was given is left as it was");
  });

  it("reads a stopping, stalled report, and leaves the run alone for `starting`", () => {
    const next = applyProgressMessage(run, "stopping · step 130/600 · loss nan · stalled");
    assert.equal(next.step, 130);
    assert.ok(Number.isNaN(next.loss));
    assert.equal(next.stalled, true);
    assert.deepEqual(applyProgressMessage(run, "starting"), run);
    assert.deepEqual(applyProgressMessage(run, undefined), run);
  });
});

describe("runToShow", () => {
  const finished: RunInfo = { runId: "old", jobId: "tiny-lm", status: "succeeded", step: 600, totalSteps: 600 };

  it("keeps the last run in view when nothing is active", () => {
    assert.equal(runToShow({ active: null, runs: [{ ...finished, runId: "older" }, finished] }), finished);
    assert.equal(runToShow({ active: run, runs: [finished] }), run);
    assert.equal(runToShow({ active: null, runs: [] }), undefined);
    assert.equal(runToShow({}), undefined);
  });
});
