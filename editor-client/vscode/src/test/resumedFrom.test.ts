import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { runTooltip } from "../core/format";
import { resumedFromLine, skippedLines } from "../core/resumedFrom";

const RESUMED = {
  step: 20,
  path: "ckpt-20.pt",
  verified: "sha256",
  skipped: [{ step: 40, path: "ckpt-40.pt", why: "is 3145728 bytes, 4194304 announced: torn or replaced" }],
};

describe("resumedFrom (contract 8.2)", () => {
  it("says which checkpoint a resume took and how it was verified", () => {
    assert.equal(resumedFromLine(RESUMED), "resumed from step 20 (ckpt-20.pt), verified by sha256");
    assert.deepEqual(skippedLines(RESUMED), ["skipped step 40 (ckpt-40.pt): is 3145728 bytes, 4194304 announced: torn or replaced"]);
  });

  it("says nothing for a run that did not resume, and copes with a damaged value", () => {
    assert.equal(resumedFromLine(null), undefined);
    assert.deepEqual(skippedLines({ step: 1, skipped: "junk" }), []);
  });

  it("is in the run's hover", () => {
    const tooltip = runTooltip({ runId: "r", jobId: "lm", status: "running", resumedFrom: RESUMED });
    assert.match(tooltip, /resumed from step 20 \(ckpt-20\.pt\), verified by sha256\nskipped step 40/);
  });
});
