import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { runItemText, runTooltip, statusReport } from "../core/format";
import { hasWarningInsight, insightBadge, insightLines, insightsOf, leadingInsight, sinceText } from "../core/insights";
import type { Insight, RunInfo } from "../core/protocol";

const spike: Insight = {
  kind: "loss-spike",
  severity: "warning",
  message: "the loss jumped to 9.1 (median 2.3): lower the learning rate or check the batch",
  since: "2026-11-30T20:14:21.461Z",
};
const edited: Insight = {
  kind: "edited-during-run",
  severity: "info",
  message: "train.py changed after launch; the run uses the version read at launch",
  since: "2026-11-30T20:15:02Z",
};
const overdue: Insight = { kind: "checkpoint-overdue", severity: "warning", message: "no checkpoint for 400 steps", since: null };

const running: RunInfo = {
  runId: "r1",
  jobId: "tiny-lm",
  status: "running",
  step: 900,
  totalSteps: 2000,
  loss: 2.3104,
  etaSeconds: 190,
};

describe("insightBadge", () => {
  it("is absent without insights (field missing, null or empty)", () => {
    assert.equal(insightBadge(running), undefined);
    assert.equal(insightBadge({ ...running, insights: null }), undefined);
    assert.equal(insightBadge({ ...running, insights: [] }), undefined);
    assert.equal(runItemText(running), "⟳ tiny-lm 900/2000 (45%) · loss 2.31 · ETA 3m");
  });

  it("shows the warning icon and the kind of one warning, after the run's own text", () => {
    const run = { ...running, insights: [spike] };
    assert.equal(insightBadge(run), "$(warning) loss-spike");
    assert.equal(runItemText(run), "⟳ tiny-lm 900/2000 (45%) · loss 2.31 · ETA 3m · $(warning) loss-spike");
  });

  it("names the first warning before an earlier information, and counts the others", () => {
    const run = { ...running, insights: [edited, spike, overdue] };
    assert.equal(leadingInsight(insightsOf(run))?.kind, "loss-spike");
    assert.equal(insightBadge(run), "$(warning) loss-spike +2");
  });

  it("uses the info icon when only an information holds", () => {
    const run = { ...running, insights: [edited] };
    assert.equal(insightBadge(run), "$(info) edited-during-run");
    assert.equal(hasWarningInsight(run), false);
    assert.equal(hasWarningInsight({ ...running, insights: [edited, overdue] }), true);
  });

  it("skips malformed entries instead of failing", () => {
    const run = { ...running, insights: [null, { severity: "warning" }, "x", overdue] as unknown as Insight[] };
    assert.equal(insightBadge(run), "$(warning) checkpoint-overdue");
  });
});

describe("insight lines", () => {
  it("gives every insight's message, with the time it was first seen", () => {
    assert.deepEqual(insightLines({ ...running, insights: [spike, edited, overdue] }), [
      `⚠ loss-spike (since 20:14:21 UTC): ${spike.message}`,
      `ℹ edited-during-run (since 20:15:02 UTC): ${edited.message}`,
      "⚠ checkpoint-overdue: no checkpoint for 400 steps",
    ]);
    assert.equal(sinceText("yesterday"), "yesterday");
    assert.equal(sinceText(null), undefined);
  });

  it("puts them in the run item's tooltip and the status report", () => {
    const run = { ...running, insights: [spike, edited] };
    const tooltip = runTooltip(run).split("\n");
    assert.ok(tooltip.includes(`⚠ loss-spike (since 20:14:21 UTC): ${spike.message}`), tooltip.join("\n"));
    assert.ok(tooltip.includes(`ℹ edited-during-run (since 20:15:02 UTC): ${edited.message}`), tooltip.join("\n"));
    const report = statusReport({ active: run, jobs: [], runs: [run] });
    assert.match(report, /^Active run: ⟳ tiny-lm 900\/2000 \(45%\) · loss 2\.31 · ETA 3m\n/);
    assert.ok(report.includes(`\n  ⚠ loss-spike (since 20:14:21 UTC): ${spike.message}\n`), report);
    assert.ok(!report.includes("$(warning)"), "codicons belong to the status bar only");
  });
});
