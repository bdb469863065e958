import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { LogRouter } from "../core/logRouter";
import type { LogLine } from "../core/protocol";

const line = (seq: number, text: string, stream: LogLine["stream"] = "stdout"): LogLine => ({ seq, stream, text });

describe("LogRouter", () => {
  it("routes a run's lines to its job, in sequence order", () => {
    const router = new LogRouter();
    router.remember({ runId: "r1", jobId: "tiny-lm" });
    assert.deepEqual(router.route("r1", [line(2, "b", "stderr"), line(1, "a")]), { jobId: "tiny-lm", texts: ["a", "[stderr] b"] });
  });

  it("drops lines already written (a backfill overlapping live lines)", () => {
    const router = new LogRouter();
    router.remember({ runId: "r1", jobId: "tiny-lm" });
    router.route("r1", [line(1, "a"), line(2, "b")]);
    assert.deepEqual(router.route("r1", [line(2, "b"), line(3, "c", "arena")]).texts, ["[arena] c"]);
  });

  it("writes everything again after a reset", () => {
    const router = new LogRouter();
    router.route("r1", [line(1, "a")]);
    router.reset("r1");
    assert.deepEqual(router.route("r1", [line(1, "a")]).texts, ["a"]);
  });

  it("keeps runs apart and reports an unknown run's job as undefined", () => {
    const router = new LogRouter();
    router.route("r1", [line(5, "x")]);
    assert.deepEqual(router.route("r2", [line(1, "y")]), { jobId: undefined, texts: ["y"] });
  });
});
