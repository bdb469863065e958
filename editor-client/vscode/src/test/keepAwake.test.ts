import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { runTooltip, statusReport } from "../core/format";
import { KEEP_AWAKE_LINE, KeepAwakeReasons, REASON_ASKS, REASON_LOG_LINES, keepAwakeReason, keepAwakeText } from "../core/keepAwake";
import type { LogLine, RunInfo } from "../core/protocol";

const REASON = "cannot reach the system bus: no such file";

function run(keepAwake: boolean | null | undefined, status: RunInfo["status"] = "running", runId = "r1"): RunInfo {
  const info: RunInfo = { runId, jobId: "tiny-lm", status };
  if (keepAwake !== undefined) {
    info.keepAwake = keepAwake;
  }
  return info;
}

function line(text: string, stream: LogLine["stream"] = "arena", seq = 0): LogLine {
  return { seq, stream, text };
}

describe("keepAwakeText", () => {
  it("says each value of a live run in the words every client uses", () => {
    assert.equal(keepAwakeText(run(true)), "keeping the machine awake");
    assert.equal(keepAwakeText(run(false)), "not keeping the machine awake");
    assert.equal(keepAwakeText(run(null), REASON), `the machine may sleep: ${REASON}`);
    assert.equal(keepAwakeText(run(null)), undefined, "not decided yet, or no line: nothing is claimed");
  });

  it("claims nothing for a server that does not say, nor for a run that ended", () => {
    assert.equal(keepAwakeText(run(undefined)), undefined);
    assert.equal(keepAwakeText(run(true, "succeeded")), undefined);
    assert.equal(keepAwakeText(run(null, "crashed"), REASON), undefined);
  });

  it("shows in the run's hover and the status report", () => {
    assert.match(runTooltip(run(true)), /\nkeeping the machine awake/);
    assert.match(runTooltip(run(null), REASON), /the machine may sleep: cannot reach the system bus/);
    const report = statusReport({ active: run(null), runs: [], jobs: [] }, REASON);
    assert.match(report, /\n {2}the machine may sleep: cannot reach the system bus: no such file/);
  });
});

describe("keepAwakeReason", () => {
  it("takes the agent's line, not a trainer's print of the same words", () => {
    const lines = [line("started"), line(KEEP_AWAKE_LINE + "a lie", "stdout", 1), line(KEEP_AWAKE_LINE + REASON, "arena", 2)];
    assert.equal(keepAwakeReason(lines), REASON);
    assert.equal(keepAwakeReason([line("started")]), undefined);
    assert.equal(keepAwakeReason([line(`${KEEP_AWAKE_LINE}  `)]), undefined);
  });
});

describe("KeepAwakeReasons", () => {
  it("asks a live run's log once, only when keepAwake is null and the reason is unknown", () => {
    const reasons = new KeepAwakeReasons();
    assert.equal(reasons.shouldAsk(run(true)), false);
    assert.equal(reasons.shouldAsk(run(null, "succeeded")), false);
    assert.equal(reasons.shouldAsk(undefined), false);
    assert.equal(reasons.shouldAsk(run(null)), true);
    assert.equal(reasons.shouldAsk(run(null)), false, "once");
    const other = new KeepAwakeReasons();
    assert.equal(other.see("r1", [line(KEEP_AWAKE_LINE + REASON)]), true);
    assert.equal(other.see("r1", [line(KEEP_AWAKE_LINE + "later")]), false);
    assert.equal(other.reasonOf("r1"), REASON);
    assert.equal(other.shouldAsk(run(null)), false, "already known from the live log");
    assert.equal(other.reasonOf("r2"), undefined);
  });
});

describe("KeepAwakeReasons.answered", () => {
  it("asks again while the log is shorter than the page (the agent has not decided yet), not after a full page", () => {
    const reasons = new KeepAwakeReasons();
    assert.equal(reasons.shouldAsk(run(null)), true);
    assert.equal(reasons.answered("r1", [line("starting")]), false);
    assert.equal(reasons.shouldAsk(run(null)), true, "a short log: asked again");
    const full = Array.from({ length: REASON_LOG_LINES }, (_, seq) => line(`line ${seq}`, "stdout", seq));
    assert.equal(reasons.answered("r1", full), false);
    assert.equal(reasons.shouldAsk(run(null)), false, "a full page without it: not read further");
    const bounded = new KeepAwakeReasons();
    const asked = Array.from({ length: REASON_ASKS + 2 }, () => {
      const ask = bounded.shouldAsk(run(null));
      bounded.answered("r1", [line("starting")]);
      return ask;
    });
    assert.deepEqual(asked.filter(Boolean).length, REASON_ASKS, "a run whose line never comes is asked a few times, not at every progress");
    const other = new KeepAwakeReasons();
    assert.equal(other.shouldAsk(run(null, "running", "r2")), true);
    assert.equal(other.answered("r2", [line(KEEP_AWAKE_LINE + REASON)]), true);
    assert.equal(other.reasonOf("r2"), REASON);
  });
});
