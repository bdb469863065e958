/**
 * The run item kept current with `$/progress`.
 *
 * The server reports a run's progress with `$/progress` as each batch of
 * lines arrives, and sends `arena/statusChanged` only on a status change, a
 * checkpoint or about once a second, so a run item drawn from
 * `arena/statusChanged` alone lags the progress. The report's message
 * (`step 120/2000 · loss 2.31 · 3.2 it/s · ETA 9m`) is merged into the run.
 */
import type { RunInfo, StatusResult } from "./protocol";

/** The run a `$/progress` token belongs to: the server names them `arena-<runId>-<8 hex>`. */
export function runIdOfToken(token: unknown): string | undefined {
  if (typeof token !== "string") {
    return undefined;
  }
  const match = /^arena-(.+)-[0-9a-f]{8}$/.exec(token);
  return match ? match[1] : undefined;
}

/** `45s`, `3m`, `1h05m` back to seconds (the server's `format_duration`). */
export function parseDuration(text: string): number | undefined {
  const match = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(text);
  if (!match || text === "") {
    return undefined;
  }
  const [hours, minutes, seconds] = match.slice(1).map((part) => (part === undefined ? 0 : Number(part)));
  return hours * 3600 + minutes * 60 + seconds;
}

function parseLoss(text: string): number | undefined {
  const lowered = text.toLowerCase();
  if (lowered === "nan") {
    return Number.NaN;
  }
  if (lowered === "inf" || lowered === "-inf") {
    return lowered.startsWith("-") ? -Infinity : Infinity;
  }
  const value = Number(text);
  return Number.isFinite(value) ? value : undefined;
}

/** The run with the fields a progress report's message carries, taken from it. */
export function applyProgressMessage(run: RunInfo, message: string | undefined): RunInfo {
  if (!message) {
    return run;
  }
  const next: RunInfo = { ...run };
  const step = /\bstep (\d+)(?:\/(\d+))?/.exec(message);
  if (step) {
    next.step = Number(step[1]);
    if (step[2] !== undefined) {
      next.totalSteps = Number(step[2]);
    }
  }
  const loss = /\bloss (\S+)/.exec(message);
  const lossValue = loss ? parseLoss(loss[1]) : undefined;
  if (lossValue !== undefined) {
    next.loss = lossValue;
  }
  const speed = /([\d.]+) it\/s\b/.exec(message);
  if (speed) {
    next.stepsPerSecond = Number(speed[1]);
  }
  const eta = /\bETA (\S+)/.exec(message);
  const etaSeconds = eta ? parseDuration(eta[1]) : undefined;
  if (etaSeconds !== undefined) {
    next.etaSeconds = etaSeconds;
  }
  if (/(^|· )stalled( ·|$)/.test(message)) {
    next.stalled = true;
  }
  return next;
}

/**
 * The run the status bar shows after reading `arena/status`: the active one,
 * else the latest run (so a refresh with nothing running keeps the last run
 * in view), else none.
 */
export function runToShow(status: StatusResult): RunInfo | undefined {
  if (status.active) {
    return status.active;
  }
  const runs = status.runs ?? [];
  return runs.length > 0 ? runs[runs.length - 1] : undefined;
}
