// The Training Room's HTTP errors: the SOP's messages (contract 7.4) and what an arena-ls refusal
// becomes on the HTTP side, its question in every client's words (moved out of training-arena.mjs).
import { ServerUnavailable } from "./arena-client.mjs";
import { Refusal, finishedPrompt, mismatchPrompt, oldCheckpointStopPrompt, refusalDetail, stopPrompt } from "./core.mjs";
import { activeShape, runShape } from "./shapes.mjs";

/** The SOP's messages (contract 7.4), kept word for word: AIDE's page and gates match them. */
export const Messages = {
  approval: "explicit training approval required",
  busy: "another Training Room job is already running",
  unknown: "training job is not allowlisted",
};

/** An error with the HTTP status and JSON body that the route answers with. */
export class TrainingError extends Error {
  constructor(status, body) {
    super(body.error);
    this.name = "TrainingError";
    this.status = status;
    this.body = body;
  }
}


/** What an arena-ls refusal (or a protocol failure) becomes on the HTTP side. */
export function httpError(error, operation, jobId = undefined) {
  if (error instanceof TrainingError) {
    return error;
  }
  if (error instanceof ServerUnavailable) {
    return new TrainingError(503, { error: error.message, reason: "arena-ls-unavailable" });
  }
  const code = typeof error?.code === "number" ? error.code : undefined;
  const data = error?.data !== null && typeof error?.data === "object" ? error.data : {};
  const reason = typeof data.reason === "string" ? data.reason : undefined;
  const rpc = { code, message: String(error?.message ?? error), data };
  const detail = code === undefined ? rpc.message : refusalDetail(rpc);
  const body = (status, fields) => new TrainingError(status, { reason, code, ...fields });
  switch (code) {
    case Refusal.notAllowlisted:
      return body(404, { error: Messages.unknown, known: data.known ?? [] });
    case Refusal.approvalRequired:
      return body(400, { error: Messages.approval });
    case Refusal.alreadyRunning:
      return body(409, { error: Messages.busy, active: activeShape(data.active) ?? runShape(data.active) });
    case Refusal.gatesFailed:
      return body(422, { error: `the trainer fails its gates: ${detail}`, diagnostics: data.diagnostics ?? [] });
    case Refusal.preflightFailed:
      return body(412, { error: `pre-flight check failed: ${detail}`, checks: data.checks ?? [] });
    case Refusal.invalidManifest:
      return body(422, { error: `the manifest does not load: ${detail}`, diagnostics: data.diagnostics ?? [] });
    case Refusal.noCheckpoint:
      if (data.lastCheckpoint !== null && typeof data.lastCheckpoint === "object") {
        // 7.3: the run has a checkpoint, but it is older than twice its cadence: the question says how much is lost.
        const prompt = oldCheckpointStopPrompt(data, new Date()) ?? `${rpc.message}. Stop anyway?`;
        return body(409, { error: prompt, lastCheckpoint: data.lastCheckpoint, lost: data.lost ?? null, cadenceSeconds: data.cadenceSeconds ?? null });
      }
      return body(409, { error: stopPrompt(data.runtimeSeconds), runtimeSeconds: data.runtimeSeconds ?? null });
    case Refusal.disabled:
      return body(409, { error: "training job is disabled in the manifest" });
    case Refusal.launchFailed:
      return body(500, { error: `the run could not be started: ${data.evidence ?? rpc.message}`, evidence: data.evidence ?? null });
    case Refusal.probeRequired:
      return body(428, { error: `the job needs a passing VRAM probe first: ${rpc.message}`, probe: data.probe ?? null });
    case 1011:
      return body(409, {
        error: `that is not the job's last checkpoint: ${rpc.message}`,
        asked: data.asked ?? null,
        lastCheckpoint: data.lastCheckpoint ?? null,
        question: mismatchPrompt(jobOf(jobId, data), data, new Date()),
      });
    case 1012:
      return body(409, { error: `the job has already finished: ${rpc.message}`, run: runShape(data.run), question: finishedPrompt(jobOf(jobId, data), data.run, new Date()) });
    case -32602:
      return body(400, { error: rpc.message.slice(0, 300) });
    default:
      return new TrainingError(500, { error: `${operation} failed: ${rpc.message.slice(0, 300)}`, code: code ?? null });
  }
}

/** The job a 1011/1012 refusal is about (its run's job, else the id the start named). */
function jobOf(jobId, data) {
  const run = data.run !== null && typeof data.run === "object" ? data.run : {};
  return String(run.jobId ?? jobId ?? "the job");
}

export function optionalBoolean(body, name) {
  const value = body[name];
  if (value !== undefined && typeof value !== "boolean") {
    throw new TrainingError(400, { error: `field \`${name}\` must be true or false` });
  }
  return value;
}
