/**
 * The words for work that a start or a stop would lose or overwrite (contract
 * 7.1 and 7.3): a job that is finished (1012), a start step that is not the
 * job's last checkpoint (1011), a stop of a run whose checkpoint is old (1007
 * with `lastCheckpoint` and `lost`), and a stopped run's `lost`. Free of the
 * editor API; the clock is passed in.
 */

type Data = Record<string, unknown>;

function record(value: unknown): Data | undefined {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Data) : undefined;
}

/** A number or a string as written; anything else (an object, null) as `?`. */
export function scalar(value: unknown): string {
  return typeof value === "number" || typeof value === "string" ? String(value) : "?";
}

function finiteNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

/** A span of work at a glance: `45 s`, `4 min`, `2 h 05 min`. */
export function fmtSpan(seconds: unknown): string {
  if (!finiteNumber(seconds)) {
    return "?";
  }
  const total = Math.max(0, Math.round(seconds));
  if (total < 60) {
    return `${total} s`;
  }
  const minutes = Math.round(total / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

function parseTime(at: unknown): Date | undefined {
  if (typeof at !== "string" || at === "") {
    return undefined;
  }
  const moment = new Date(at);
  return Number.isNaN(moment.getTime()) ? undefined : moment;
}

/** `3 h 05 min ago`, or `at an unknown time`. */
export function fmtAge(at: unknown, now: Date): string {
  const moment = parseTime(at);
  return moment ? `${fmtSpan((now.getTime() - moment.getTime()) / 1000)} ago` : "at an unknown time";
}

/** `2026-12-01 15:48 UTC, 12 min ago`. */
export function fmtWhen(at: unknown, now: Date): string {
  const moment = parseTime(at);
  if (!moment) {
    return "at an unknown time";
  }
  const iso = moment.toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC, ${fmtAge(at, now)}`;
}

/** `step 600 (checkpoints/ckpt.pt, saved 3 h 05 min ago by run r-1)`. */
export function checkpointWords(checkpoint: unknown, now: Date): string {
  const found = record(checkpoint);
  if (!found) {
    return "no checkpoint";
  }
  const details = typeof found.path === "string" && found.path ? [found.path] : [];
  let saved = `saved ${fmtAge(found.at, now)}`;
  if (typeof found.runId === "string" && found.runId) {
    saved += ` by run ${found.runId}`;
  }
  details.push(saved);
  return `step ${scalar(found.step)} (${details.join(", ")})`;
}

/** `90 steps (4 min)`, or `4 min` when the steps are not known (`steps` null). */
export function lostAmount(lost: Data): string {
  const steps = lost.steps;
  const span = fmtSpan(lost.seconds);
  return typeof steps === "number" && Number.isInteger(steps) ? `${steps} step${steps === 1 ? "" : "s"} (${span})` : span;
}

/** 1012: the job trained all its steps; the question offers a fresh start. */
export function finishedPrompt(jobId: string, run: unknown, now: Date): string {
  const info = record(run) ?? {};
  const steps = info.totalSteps ?? info.step;
  const what = steps !== undefined && steps !== null ? `trained all ${scalar(steps)} steps` : "trained all its steps";
  const by = typeof info.runId === "string" && info.runId ? ` in run ${info.runId}` : "";
  return `${jobId} is finished: it ${what}${by} (ended ${fmtWhen(info.endedAt, now)}). Start over from step 0? The new run overwrites its checkpoints.`;
}

/** 1011: the step asked for against the job's last checkpoint, with its age. */
export function mismatchPrompt(jobId: string, data: Data, now: Date): string {
  const asked = scalar(data.asked);
  const last = record(data.lastCheckpoint);
  const resumes = last ? ` A plain start resumes from step ${scalar(last.step)}.` : "";
  return `You asked to start ${jobId} at step ${asked}, but its last checkpoint is ${checkpointWords(last, now)}.${resumes} Start at step ${asked} anyway?`;
}

/** 1007 with an old checkpoint: how much stopping now loses; undefined without `lost`. */
export function oldCheckpointStopPrompt(data: Data, now: Date): string | undefined {
  const lost = record(data.lost);
  const last = record(data.lastCheckpoint);
  if (!lost || !last) {
    return undefined;
  }
  return `This run's last checkpoint is ${checkpointWords(last, now)}; stopping it now loses ${lostAmount(lost)} of training. Stop anyway?`;
}

const STOP_VERBS: Readonly<Record<string, string>> = { kill: "killed", battery: "stopped on battery" };

/**
 * `killed at step 390; last checkpoint 300: 90 steps (4 min) lost`, from a
 * stopped run's `lost`; undefined when the run says nothing of it (null or absent).
 */
export function lostLine(run: unknown): string | undefined {
  const info = record(run);
  const lost = record(info?.lost);
  if (!info || !lost) {
    return undefined;
  }
  const verb = STOP_VERBS[scalar(info.stoppedBy)] ?? "stopped";
  const last = record(info.lastCheckpoint)?.step;
  const where = info.step !== undefined && info.step !== null ? `${verb} at step ${scalar(info.step)}` : verb;
  if (lost.steps === 0) {
    return `${where}; nothing lost${last !== undefined ? ` (checkpoint at step ${scalar(last)})` : ""}`;
  }
  const since = last !== undefined ? `last checkpoint ${scalar(last)}` : "no checkpoint";
  return `${where}; ${since}: ${lostAmount(lost)} lost`;
}
