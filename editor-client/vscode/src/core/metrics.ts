/**
 * A run's whole `arena/metrics`, read page by page (contract 7.2).
 *
 * The server answers at most `limit` points, `limit` checkpoints and `limit`
 * evals a page (10,000 by default) with `next`, the cursor of the page after
 * it. This follows `next` until the run's metrics end: `next: null` (a
 * finished run read to its end), or a page that is not full (while a run is
 * live `next` is always a cursor, so a page with room left reached the end of
 * the log as it was). A server older than 7.2 answers everything with no
 * `next`: one page. A step (or checkpoint) announced twice that falls on both
 * sides of a page boundary is merged into one, the later filling in what the
 * earlier lacked, as the server does inside a page. The same rules as the
 * terminal client's `arena_ls/client/metrics.py`.
 *
 * No VS Code, AIDE or Neovim view reads metrics yet; any that does pages
 * through this.
 */
import { Methods } from "./protocol";

export interface MetricsPoint {
  step: number;
  loss?: number | null;
  lr?: number | null;
  at?: string | null;
  gradNorm?: number | null;
  clipFraction?: number | null;
}

export interface MetricsCheckpoint {
  step: number;
  path?: string | null;
  at?: string | null;
}

export interface MetricsEval {
  step: number;
  loss?: number | null;
  at?: string | null;
}

export interface MetricsRelaunch {
  step: number;
  at?: string | null;
}

export interface MetricsResult {
  runId: string | null;
  points: MetricsPoint[];
  checkpoints: MetricsCheckpoint[];
  evals: MetricsEval[];
  relaunches: MetricsRelaunch[];
  /** The cursor after the last page read: null once the run's metrics ended. */
  next: string | null;
}

export interface MetricsParams {
  runId: string;
  limit: number;
  cursor?: string;
}

/** Sends one request and resolves with its result (the language client's `sendRequest`). */
export type Request = (method: string, params: MetricsParams) => Promise<unknown>;

/** The contract's default page, and the server's largest. */
export const PAGE_LIMIT = 10_000;

type Series = "points" | "checkpoints" | "evals" | "relaunches";
const SERIES: readonly Series[] = ["points", "checkpoints", "evals", "relaunches"];

function record(value: unknown): Record<string, unknown> | undefined {
  return value !== null && typeof value === "object" && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function items(page: Record<string, unknown>, name: Series): Record<string, unknown>[] {
  const values = page[name];
  return Array.isArray(values) ? values.map(record).filter((item) => item !== undefined) : [];
}

/** A page that stopped at `limit` (more may follow at once), not at the end of the log. */
function full(page: Record<string, unknown>, limit: number): boolean {
  return (["points", "checkpoints", "evals"] as const).some((name) => items(page, name).length >= limit);
}

function sameStep(earlier: Record<string, unknown>, later: Record<string, unknown>): boolean {
  return typeof earlier.step === "number" && earlier.step === later.step;
}

function merge(merged: Record<Series, Record<string, unknown>[]>, page: Record<string, unknown>): void {
  for (const name of SERIES) {
    const added = items(page, name);
    const soFar = merged[name];
    const twin = name === "points" || name === "checkpoints";
    if (twin && added.length > 0 && soFar.length > 0 && sameStep(soFar[soFar.length - 1], added[0])) {
      const earlier = soFar.pop() as Record<string, unknown>;
      const filled = Object.fromEntries(Object.entries(added[0]).filter(([, value]) => value !== null && value !== undefined));
      added[0] = { ...earlier, ...filled };
    }
    soFar.push(...added);
  }
}

/** Every page of `arena/metrics` of `runId`, merged into one result of the same shape. */
export async function readAllMetrics(request: Request, runId: string, limit = PAGE_LIMIT): Promise<MetricsResult> {
  const merged: Record<Series, Record<string, unknown>[]> = { points: [], checkpoints: [], evals: [], relaunches: [] };
  let cursor: string | undefined;
  let next: string | null = null;
  for (;;) {
    const params: MetricsParams = cursor === undefined ? { runId, limit } : { runId, limit, cursor };
    const page = record(await request(Methods.metrics, params));
    if (page === undefined) {
      break;
    }
    merge(merged, page);
    const following = typeof page.next === "string" ? page.next : null;
    next = following;
    if (following === null || following === cursor || !full(page, limit)) {
      break;
    }
    cursor = following;
  }
  return {
    runId,
    points: merged.points as unknown as MetricsPoint[],
    checkpoints: merged.checkpoints as unknown as MetricsCheckpoint[],
    evals: merged.evals as unknown as MetricsEval[],
    relaunches: merged.relaunches as unknown as MetricsRelaunch[],
    next,
  };
}
