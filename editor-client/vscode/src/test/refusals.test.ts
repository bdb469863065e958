import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { asRpcError, decide, reasonOf, stopPrompt } from "../core/refusals";
import type { Operation } from "../core/refusals";

const start: Operation = { kind: "start", params: { id: "tiny-lm" } };
const stop: Operation = { kind: "stop", params: { runId: "r1" }, jobLabel: "tiny-lm" };

describe("decide", () => {
  it("asks for approval and retries the start with approved: true", () => {
    const decision = decide(start, { code: 1002, message: "needs approval", data: { reason: "approval-required" } });
    assert.deepEqual(decision, {
      kind: "confirm",
      prompt: "Run tiny-lm? It needs approval.",
      confirmLabel: "Run",
      retry: { kind: "start", params: { id: "tiny-lm", approved: true } },
    });
  });

  it("does not ask twice when approval was already given", () => {
    const approved: Operation = { kind: "start", params: { id: "tiny-lm", approved: true } };
    const decision = decide(approved, { code: 1002, message: "needs approval", data: { reason: "approval-required" } });
    assert.equal(decision.kind, "error");
  });

  it("warns about the training lost and retries the stop with confirm: true", () => {
    const decision = decide(stop, { code: 1007, message: "no checkpoint", data: { reason: "no-checkpoint", runtimeSeconds: 612 } });
    assert.equal(decision.kind, "confirm");
    if (decision.kind !== "confirm") {
      return;
    }
    assert.equal(decision.prompt, "This run has no checkpoint yet; stopping it now loses 10 min of training. Stop anyway?");
    assert.deepEqual(decision.retry, { kind: "stop", params: { runId: "r1", confirm: true }, jobLabel: "tiny-lm" });
  });

  it("shows every other refusal with its reason", () => {
    const cases: [number, unknown, RegExp][] = [
      [1001, { reason: "not-allowlisted", known: ["a", "b"] }, /cannot start tiny-lm \(not-allowlisted\).*known jobs: a, b/],
      [1003, { reason: "already-running", active: { jobId: "other", status: "running" } }, /\(already-running\): other is running/],
      [1004, { reason: "gates-failed", diagnostics: [{ code: "AR004", message: "no checkpoint save" }] }, /\(gates-failed\): AR004 no checkpoint save/],
      [
        1005,
        { reason: "preflight-failed", checks: [{ name: "ram", ok: false, message: "1 GB free" }, { name: "disk", ok: true, message: "" }] },
        /\(preflight-failed\): ram: 1 GB free$/,
      ],
      [1006, { reason: "invalid-manifest", diagnostics: [] }, /\(invalid-manifest\): bad/],
      [1008, { reason: "disabled" }, /\(disabled\): bad/],
    ];
    for (const [code, data, expected] of cases) {
      const decision = decide(start, { code, message: "bad", data });
      assert.equal(decision.kind, "error");
      assert.match(decision.kind === "error" ? decision.message : "", expected);
    }
  });

  it("summarises long diagnostic lists", () => {
    const diagnostics = ["a", "b", "c", "d", "e"].map((message) => ({ message }));
    const decision = decide(start, { code: 1004, message: "gates", data: { reason: "gates-failed", diagnostics } });
    assert.match(decision.kind === "error" ? decision.message : "", /a; b; c; and 2 more$/);
  });

  it("shows protocol errors with their message and no reason", () => {
    const decision = decide(stop, { code: -32602, message: "runId must be a string" });
    assert.deepEqual(decision, { kind: "error", message: "Arena: cannot stop tiny-lm: runId must be a string" });
  });
});

describe("reasons and minutes", () => {
  it("takes the reason from data, else from the code", () => {
    assert.equal(reasonOf({ code: 1003, message: "" }), "already-running");
    assert.equal(reasonOf({ code: 1013, message: "" }), "cluster-unreachable", "every refusal of arena_ls/errors.py (generated)");
    assert.equal(reasonOf({ code: 1, message: "", data: { reason: "custom" } }), "custom");
    assert.equal(reasonOf({ code: -32603, message: "" }), undefined);
  });

  it("says the runtime a stop loses as it is: seconds for a young run, never a rounded-up minute", () => {
    assert.equal(stopPrompt(3.2), "This run has no checkpoint yet; stopping it now loses 3 s of training. Stop anyway?");
    assert.equal(stopPrompt(150), "This run has no checkpoint yet; stopping it now loses 3 min of training. Stop anyway?");
    assert.equal(stopPrompt("x"), "This run has no checkpoint yet; stopping it now loses all of its training. Stop anyway?");
    assert.equal(stopPrompt(undefined), "This run has no checkpoint yet; stopping it now loses all of its training. Stop anyway?");
  });

  it("recognises thrown JSON-RPC errors only", () => {
    assert.deepEqual(asRpcError({ code: 1002, message: "m", data: { reason: "approval-required" } }), {
      code: 1002,
      message: "m",
      data: { reason: "approval-required" },
    });
    assert.equal(asRpcError(new Error("boom")), undefined);
    assert.equal(asRpcError("boom"), undefined);
  });
});

describe("probe-required (1010)", () => {
  const failed = { ok: false, peakVramMb: 6000, at: "2026-11-30T20:10:00Z", message: "peak 6000 MB is above the 5120 MB limit" };

  it("offers to run the probe, saying why the start was refused", () => {
    const decision = decide(start, { code: 1010, message: "needs a probe", data: { reason: "probe-required", probe: failed } });
    assert.deepEqual(decision, {
      kind: "confirm",
      prompt: `tiny-lm needs a passing VRAM probe before it runs (its last probe failed: ${failed.message}). Run the probe now?`,
      confirmLabel: "Run Probe",
      retry: { kind: "start", params: { id: "tiny-lm", probe: true } },
    });
  });

  it("keeps an approval already given, and drops the start's resume choice", () => {
    const approved: Operation = { kind: "start", params: { id: "tiny-lm", approved: true, resume: false } };
    const decision = decide(approved, { code: 1010, message: "needs a probe", data: { reason: "probe-required", probe: null } });
    assert.equal(decision.kind, "confirm");
    if (decision.kind === "confirm") {
      assert.deepEqual(decision.retry, { kind: "start", params: { id: "tiny-lm", approved: true, probe: true } });
      assert.match(decision.prompt, /no probe of its current trainer/);
    }
  });

  it("never offers a probe for a probe, and names the probe in errors", () => {
    const probing: Operation = { kind: "start", params: { id: "tiny-lm", probe: true } };
    const decision = decide(probing, { code: 1010, message: "needs a probe", data: { reason: "probe-required" } });
    assert.deepEqual(decision, { kind: "error", message: "Arena: cannot probe tiny-lm (probe-required): needs a probe" });
    const approval = decide(probing, { code: 1002, message: "needs approval" });
    assert.equal(approval.kind === "confirm" && approval.prompt, "Probe tiny-lm? It needs approval.");
    assert.equal(reasonOf({ code: 1009, message: "launch failed" }), "launch-failed");
  });
});
