import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type MetricsParams, type Request, readAllMetrics } from "../core/metrics";

interface Line {
  kind: "point" | "checkpoint" | "eval";
  value: Record<string, unknown>;
}

/**
 * `arena/metrics` as the server pages a run's log: at most `limit` of each series a page, in log
 * order; `next` is the line to go on from (`m.N`), null once a finished run's page reached the end,
 * and always a cursor while the run is live. A step announced twice in a row is merged inside a page.
 */
function pagedServer(lines: Line[], live = false): { request: Request; asked: MetricsParams[] } {
  const asked: MetricsParams[] = [];
  const request = (method: string, params: MetricsParams): Promise<unknown> => {
    assert.equal(method, "arena/metrics");
    asked.push(params);
    const page = { runId: params.runId, points: [] as Record<string, unknown>[], checkpoints: [] as Record<string, unknown>[], evals: [] as Record<string, unknown>[], relaunches: [], next: null as string | null };
    let at = params.cursor === undefined ? 0 : Number(params.cursor.slice(2));
    for (; at < lines.length; at++) {
      if (page.points.length >= params.limit || page.checkpoints.length >= params.limit || page.evals.length >= params.limit) {
        page.next = `m.${at}`;
        return Promise.resolve(page);
      }
      const { kind, value } = lines[at];
      const series = kind === "point" ? page.points : kind === "checkpoint" ? page.checkpoints : page.evals;
      const last = series[series.length - 1];
      if (kind !== "eval" && last !== undefined && last.step === value.step) {
        series[series.length - 1] = { ...last, ...Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null)) };
      } else {
        series.push({ ...value });
      }
    }
    page.next = live ? `m.${at}` : null;
    return Promise.resolve(page);
  };
  return { request, asked };
}

function longRun(steps: number): Line[] {
  const lines: Line[] = [];
  for (let step = 1; step <= steps; step++) {
    lines.push({ kind: "point", value: { step, loss: 3 / step, lr: null, at: "t" } });
    lines.push({ kind: "point", value: { step, loss: null, lr: 0.01, at: "t" } }); // its @arena twin
    lines.push({ kind: "checkpoint", value: { step, path: `ckpt-${step}.pt`, at: "t" } });
    if (step % 3 === 0) {
      lines.push({ kind: "eval", value: { step, loss: 4 / step, at: "t" } });
    }
  }
  return lines;
}

describe("readAllMetrics", () => {
  it("follows next until the end: every point, checkpoint and eval of a run longer than a page", async () => {
    const { request } = pagedServer(longRun(30));
    const whole = await request("arena/metrics", { runId: "r", limit: 10_000 });
    for (const limit of [1, 2, 7]) {
      const merged = await readAllMetrics(request, "r", limit);
      assert.equal(merged.points.length, 30, `pages of ${limit}`);
      assert.deepEqual(merged.points.map((p) => p.step), Array.from({ length: 30 }, (_, i) => i + 1));
      assert.ok(merged.points.every((p) => p.loss !== null && p.lr === 0.01), "a step split across pages is one point");
      assert.equal(merged.checkpoints.length, 30);
      assert.equal(merged.evals.length, 10);
      assert.deepEqual({ ...merged, runId: "r" }, { ...(whole as object), relaunches: [] }, `pages of ${limit}`);
      assert.equal(merged.next, null);
    }
  });

  it("asks with the page size and the cursor of the page before", async () => {
    const { request, asked } = pagedServer(longRun(4));
    await readAllMetrics(request, "r", 1);
    assert.deepEqual(asked[0], { runId: "r", limit: 1 });
    assert.ok(asked.length > 2 && asked.slice(1).every((p) => typeof p.cursor === "string"));
  });

  it("stops at a live run's end, keeping the cursor a later read goes on from", async () => {
    const { request, asked } = pagedServer(longRun(5), true);
    const merged = await readAllMetrics(request, "r", 2);
    assert.equal(merged.points.length, 5);
    assert.equal(typeof merged.next, "string");
    const again = asked.length;
    await readAllMetrics(request, "r", 2);
    assert.equal(asked.length, again * 2, "the same number of pages each time: no endless loop");
  });

  it("takes an older server's one page without next, and an answer that is not a page", async () => {
    const one = await readAllMetrics(() => Promise.resolve({ runId: "r", points: [{ step: 1 }], checkpoints: [] }), "r");
    assert.deepEqual(one.points, [{ step: 1 }]);
    assert.deepEqual([one.evals, one.relaunches, one.next], [[], [], null]);
    const none = await readAllMetrics(() => Promise.resolve(null), "r");
    assert.deepEqual(none.points, []);
  });
});
