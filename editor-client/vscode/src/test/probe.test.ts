import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { jobPicks, statusReport } from "../core/format";
import {
  isNewVerdict,
  probeCandidates,
  probeRequiredPrompt,
  probeSummary,
  probedJobOf,
  verdictMessage,
  waitForVerdict,
} from "../core/probe";
import type { JobInfo, ProbeVerdict } from "../core/protocol";

const passed: ProbeVerdict = { ok: true, peakVramMb: 3000, at: "2026-11-30T20:14:21.461Z", message: "peak 3000 MB is within 5120 MB" };
const failed: ProbeVerdict = {
  ok: false,
  peakVramMb: 6000,
  at: "2026-11-30T20:10:00.000Z",
  message: "peak 6000 MB is above the 5120 MB limit (probe.maxVramMb)",
};
const noGpu: ProbeVerdict = { ok: false, peakVramMb: null, at: "2026-11-30T20:11:00Z", message: "no GPU could be read (no GPU found)" };

describe("probe texts", () => {
  it("says passed or failed and the peak", () => {
    assert.equal(probeSummary(passed), "probe passed (3000 MB)");
    assert.equal(probeSummary(failed), "probe failed (6000 MB)");
    assert.equal(probeSummary(noGpu), "probe failed");
    assert.equal(probeSummary(null), undefined);
    assert.equal(probeSummary({ peakVramMb: 1 }), undefined);
  });

  it("words the verdict's message by its outcome", () => {
    assert.deepEqual(verdictMessage("tiny-lm", passed), {
      level: "info",
      text: "Arena: tiny-lm probe passed (3000 MB): peak 3000 MB is within 5120 MB",
    });
    assert.deepEqual(verdictMessage("tiny-lm", noGpu), {
      level: "warning",
      text: "Arena: tiny-lm probe failed: no GPU could be read (no GPU found)",
    });
  });

  it("asks to run the probe on 1010, saying why", () => {
    assert.equal(
      probeRequiredPrompt("tiny-lm", null),
      "tiny-lm needs a passing VRAM probe before it runs (no probe of its current trainer). Run the probe now?",
    );
    assert.equal(
      probeRequiredPrompt("tiny-lm", failed),
      `tiny-lm needs a passing VRAM probe before it runs (its last probe failed: ${failed.message}). Run the probe now?`,
    );
  });

  it("knows a probe run's job", () => {
    assert.equal(probedJobOf("tiny-lm.probe"), "tiny-lm");
    assert.equal(probedJobOf("tiny-lm"), undefined);
    assert.equal(probedJobOf(".probe"), undefined);
  });
});

describe("the pickers and the report show JobInfo.probe", () => {
  const jobs: JobInfo[] = [
    { id: "tiny-lm", kind: "train", status: "ready", runnable: true, probe: passed },
    { id: "fresh", kind: "train", status: "ready", runnable: true, probe: null },
    { id: "export", kind: "task", status: "ready", runnable: true },
  ];

  it("offers train jobs only to the probe picker, each with its last verdict", () => {
    const candidates = probeCandidates(jobs);
    assert.deepEqual(
      candidates.map((job) => job.id),
      ["tiny-lm", "fresh"],
    );
    assert.deepEqual(
      jobPicks(candidates, "probe").map((pick) => pick.description),
      ["tiny-lm · train · probe passed (3000 MB)", "fresh · train · not probed yet"],
    );
  });

  it("shows a verdict in the run picker, nothing for a job never probed", () => {
    assert.deepEqual(
      jobPicks(jobs).map((pick) => pick.description),
      ["tiny-lm · train · probe passed (3000 MB)", "fresh · train", "export · task"],
    );
  });

  it("adds it to the job's line of the status report", () => {
    const report = statusReport({ jobs: [jobs[0], { ...jobs[1], runnable: false, probe: failed, blockedBy: [{ code: "AR004", message: "no save" }] }] });
    assert.ok(report.includes("  ▶ tiny-lm (train) ready · probe passed (3000 MB)\n"), report);
    assert.ok(report.includes("  ⊘ fresh (train) · probe failed (6000 MB) blocked:\n      AR004: no save\n"), report);
  });
});

describe("waiting for the verdict", () => {
  const noSleep = (): Promise<void> => Promise.resolve();

  it("returns the first verdict that differs from the one before the probe", async () => {
    const answers: (ProbeVerdict | null)[] = [failed, failed, passed];
    let reads = 0;
    const verdict = await waitForVerdict(() => Promise.resolve(answers[reads++]), failed, { attempts: 10, delayMs: 0, sleep: noSleep });
    assert.deepEqual(verdict, passed);
    assert.equal(reads, 3);
  });

  it("takes any verdict when there was none before, and gives up after the attempts", async () => {
    assert.deepEqual(await waitForVerdict(() => Promise.resolve(noGpu), null, { attempts: 3, delayMs: 0, sleep: noSleep }), noGpu);
    let reads = 0;
    const none = await waitForVerdict(
      () => {
        reads++;
        return Promise.resolve(null);
      },
      null,
      { attempts: 3, delayMs: 0, sleep: noSleep },
    );
    assert.equal(none, undefined);
    assert.equal(reads, 3);
  });

  it("tells a new verdict of the same outcome by its time", () => {
    assert.equal(isNewVerdict(failed, { ...failed }), false);
    assert.equal(isNewVerdict(failed, { ...failed, at: "2026-11-30T21:00:00Z" }), true);
    assert.equal(isNewVerdict(passed, null), false);
  });
});
