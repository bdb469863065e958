/**
 * The words for work that a start or a stop would lose or overwrite (contract
 * 7.1 and 7.3): a job that is finished (1012), a start step that is not the
 * job's last checkpoint (1011), a stop of a run whose checkpoint is old (1007
 * with `lastCheckpoint` and `lost`), and a stopped run's `lost`. Free of the
 * editor API; the clock is passed in. The texts are arena_ls/wording.py's, generated into
 * ./wording.ts; tests/editor/fixtures/wording_cases.json holds what the terminal client says for
 * the same answers, and src/test/wording.test.ts checks that these functions say the same.
 */
import { say } from "./wording";


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
    return say("spanUnknown");
  }
  const total = Math.max(0, Math.round(seconds));
  if (total === 0 && seconds > 0) {
    return say("spanUnderSecond");
  }
  if (total < 60) {
    return say("spanSeconds", { seconds: total });
  }
  const minutes = Math.round(total / 60);
  if (minutes < 60) {
    return say("spanMinutes", { minutes });
  }
  return say("spanHours", { hours: Math.floor(minutes / 60), minutes: String(minutes % 60).padStart(2, "0") });
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
  return moment ? say("ago", { span: fmtSpan((now.getTime() - moment.getTime()) / 1000) }) : say("unknownTime");
}

/** `2026-12-01 15:48 UTC, 12 min ago`. */
export function fmtWhen(at: unknown, now: Date): string {
  const moment = parseTime(at);
  if (!moment) {
    return say("unknownTime");
  }
  const iso = moment.toISOString();
  return say("when", { date: iso.slice(0, 10), time: iso.slice(11, 16), age: fmtAge(at, now) });
}

/** `step 600 (checkpoints/ckpt.pt, saved 3 h 05 min ago by run r-1)`. */
export function checkpointWords(checkpoint: unknown, now: Date): string {
  const found = record(checkpoint);
  if (!found) {
    return say("noCheckpoint");
  }
  const details = typeof found.path === "string" && found.path ? [found.path] : [];
  const age = fmtAge(found.at, now);
  const by = typeof found.runId === "string" && found.runId ? found.runId : undefined;
  details.push(by === undefined ? say("checkpointSaved", { age }) : say("checkpointSavedBy", { age, runId: by }));
  return say("checkpoint", { step: scalar(found.step), details: details.join(", ") });
}

/** `90 steps (4 min)`, or `4 min` when the steps are not known (`steps` null). */
export function lostAmount(lost: Data): string {
  const steps = lost.steps;
  const span = fmtSpan(lost.seconds);
  if (typeof steps !== "number" || !Number.isInteger(steps)) {
    return span;
  }
  return steps === 1 ? say("lostStep", { span }) : say("lostSteps", { steps, span });
}

/** A question as an editor puts it: what would be lost or overwritten, then what to answer. */
export function prompt(warning: string, question: string): string {
  return say("prompt", { warning, question });
}

/** 1012: `tiny-lm is finished: it trained all 600 steps in run r-1 (ended …)`. */
export function finishedWords(jobId: string, run: unknown, now: Date): string {
  const info = record(run) ?? {};
  const steps = info.totalSteps ?? info.step;
  const what = steps !== undefined && steps !== null ? say("finishedSteps", { steps: scalar(steps) }) : say("finishedAllSteps");
  const by = typeof info.runId === "string" && info.runId ? say("finishedInRun", { runId: info.runId }) : "";
  return say("finished", { job: jobId, what, by, when: fmtWhen(info.endedAt, now) });
}

/** 1012: the job trained all its steps; the question offers a fresh start. */
export function finishedPrompt(jobId: string, run: unknown, now: Date): string {
  return prompt(finishedWords(jobId, run, now), say("finishedQuestion"));
}

/** 1011: the step asked for against the job's last checkpoint, with its age. */
export function mismatchPrompt(jobId: string, data: Data, now: Date): string {
  const asked = scalar(data.asked);
  const last = record(data.lastCheckpoint);
  let words = say("mismatch", { job: jobId, asked, checkpoint: checkpointWords(last, now) });
  if (last) {
    words += `. ${say("mismatchResumes", { start: say("mismatchPlainStart"), step: scalar(last.step) })}`;
  }
  return prompt(words, say("mismatchQuestion", { asked }));
}

/** 1007 with an old checkpoint: how much stopping now loses; undefined without `lost`. */
export function oldCheckpointStopPrompt(data: Data, now: Date): string | undefined {
  const lost = record(data.lost);
  const last = record(data.lastCheckpoint);
  if (!lost || !last) {
    return undefined;
  }
  return prompt(say("stopOldCheckpoint", { checkpoint: checkpointWords(last, now), amount: lostAmount(lost) }), say("stopQuestion"));
}

/** 1007 without a checkpoint: the run's whole runtime (`runtimeSeconds`) is lost, or all of its training when unknown. */
export function noCheckpointStopPrompt(runtimeSeconds: unknown): string {
  const known = finiteNumber(runtimeSeconds) && runtimeSeconds >= 0;
  return prompt(known ? say("stopLoses", { span: fmtSpan(runtimeSeconds) }) : say("stopLosesAll"), say("stopQuestion"));
}

/** The 1007 question, whichever the refusal's data says: an old checkpoint's `lost`, else the runtime. */
export function stopQuestion(data: Data, now: Date): string {
  return oldCheckpointStopPrompt(data, now) ?? noCheckpointStopPrompt(data.runtimeSeconds);
}

const STOP_VERBS: Readonly<Record<string, "stoppedKill" | "stoppedBattery">> = { kill: "stoppedKill", battery: "stoppedBattery" };

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
  const verb = say(STOP_VERBS[scalar(info.stoppedBy)] ?? "stopped");
  const last = record(info.lastCheckpoint)?.step;
  const known = last !== undefined && last !== null;
  const where = info.step !== undefined && info.step !== null ? say("stoppedAt", { verb, step: scalar(info.step) }) : verb;
  if (lost.steps === 0) {
    return known ? say("lostNothingSaved", { where, step: scalar(last) }) : say("lostNothing", { where });
  }
  const amount = lostAmount(lost);
  return known ? say("lostSince", { where, step: scalar(last), amount }) : say("lostNoCheckpoint", { where, amount });
}

/** The notice of a stop's result: `tiny-lm killed at step 390; last checkpoint 300: 90 steps (4 min) lost`, else `tiny-lm stopped`. */
export function stoppedNotice(run: unknown): string {
  const info = record(run) ?? {};
  const lost = lostLine(info);
  const job = scalar(info.jobId);
  return lost === undefined ? say("runEnded", { job, status: scalar(info.status) }) : say("runStopped", { job, lost });
}
