/**
 * What the client does with a refusal from `arena/start` or `arena/stop`
 * (contract section 4.3): ask and retry for the two refusals a person can
 * overrule, offer the VRAM probe a start needs (1010, section 6.3), show the
 * reason for every other one.
 */
import { probeRequiredPrompt } from "./probe";
import { finishedPrompt, mismatchPrompt, noCheckpointStopPrompt, scalar, stopQuestion } from "./workLost";
import type { StartParams, StopParams } from "./protocol";
import { REASONS } from "./wording";

export const Refusal = {
  notAllowlisted: 1001,
  approvalRequired: 1002,
  alreadyRunning: 1003,
  gatesFailed: 1004,
  preflightFailed: 1005,
  invalidManifest: 1006,
  noCheckpoint: 1007,
  disabled: 1008,
  launchFailed: 1009,
  probeRequired: 1010,
  checkpointMismatch: 1011,
  alreadyFinished: 1012,
  clusterUnreachable: 1013,
} as const;

/** A JSON-RPC error as any client library hands it over. */
export interface RpcError {
  code: number;
  message: string;
  data?: unknown;
}

export type Operation =
  | { kind: "start"; params: StartParams }
  | { kind: "stop"; params: StopParams; jobLabel?: string };

export type Decision =
  | { kind: "confirm"; prompt: string; confirmLabel: string; retry: Operation }
  | { kind: "error"; message: string };

type Data = Record<string, unknown>;

function dataOf(error: RpcError): Data {
  return error.data !== null && typeof error.data === "object" ? (error.data as Data) : {};
}

/** The refusal's reason: `error.data.reason`, else the reason its code stands for. */
export function reasonOf(error: RpcError): string | undefined {
  const reason = dataOf(error).reason;
  return typeof reason === "string" ? reason : REASONS[error.code];
}

/** The 1007 question of a run with no checkpoint yet: its runtime (`3 s`, `12 min`) is what a stop loses. */
export function stopPrompt(runtimeSeconds: unknown): string {
  return noCheckpointStopPrompt(runtimeSeconds);
}

function messagesOf(items: unknown, limit = 3): string[] {
  if (!Array.isArray(items)) {
    return [];
  }
  const texts = items.map((item: unknown) => {
    if (item === null || typeof item !== "object") {
      return String(item);
    }
    const record = item as Data;
    const code = typeof record.code === "string" ? `${record.code} ` : "";
    return `${code}${typeof record.message === "string" ? record.message : JSON.stringify(item)}`;
  });
  const shown = texts.slice(0, limit);
  if (texts.length > limit) {
    shown.push(`and ${texts.length - limit} more`);
  }
  return shown;
}

/** The human part of a refusal, from the fields `error.data` carries for its code. */
export function refusalDetail(error: RpcError): string {
  const data = dataOf(error);
  switch (error.code) {
    case Refusal.notAllowlisted: {
      const known = Array.isArray(data.known) ? data.known.map(String).join(", ") : "";
      return known ? `${error.message} (known jobs: ${known})` : error.message;
    }
    case Refusal.alreadyRunning: {
      const active = data.active !== null && typeof data.active === "object" ? (data.active as Data) : {};
      const job = typeof active.jobId === "string" ? active.jobId : undefined;
      const status = typeof active.status === "string" ? active.status : "running";
      return job ? `${job} is ${status}; one run at a time` : error.message;
    }
    case Refusal.gatesFailed:
    case Refusal.invalidManifest: {
      const found = messagesOf(data.diagnostics);
      return found.length > 0 ? found.join("; ") : error.message;
    }
    case Refusal.preflightFailed: {
      const checks = Array.isArray(data.checks) ? data.checks : [];
      const failing = checks
        .filter((check: unknown) => check !== null && typeof check === "object" && (check as Data).ok === false)
        .map((check: unknown) => `${String((check as Data).name)}: ${String((check as Data).message)}`);
      return failing.length > 0 ? failing.join("; ") : error.message;
    }
    default:
      return error.message;
  }
}

function operationLabel(operation: Operation): string {
  if (operation.kind === "start") {
    return `${operation.params.probe === true ? "probe" : "start"} ${operation.params.id}`;
  }
  const target = operation.jobLabel ?? operation.params.id ?? operation.params.runId;
  return target ? `stop ${target}` : "stop the run";
}

/**
 * The client's answer to a failed `arena/start` / `arena/stop`: a question
 * whose "yes" retries with the overriding flag (only if that flag was not
 * already sent, so a retry can never loop) or, on 1010, runs the job's
 * probe instead; or an error to show.
 */
export function decide(operation: Operation, error: RpcError, now: Date = new Date()): Decision {
  const overwrite = decideOverwrite(operation, error, now);
  if (overwrite) {
    return overwrite;
  }
  if (operation.kind === "start" && error.code === Refusal.approvalRequired && operation.params.approved !== true) {
    return {
      kind: "confirm",
      prompt: `${operation.params.probe === true ? "Probe" : "Run"} ${operation.params.id}? It needs approval.`,
      confirmLabel: "Run",
      retry: { kind: "start", params: { ...operation.params, approved: true } },
    };
  }
  if (operation.kind === "stop" && error.code === Refusal.noCheckpoint && operation.params.confirm !== true) {
    return {
      kind: "confirm",
      prompt: stopQuestion(dataOf(error), now),
      confirmLabel: "Stop anyway",
      retry: { ...operation, params: { ...operation.params, confirm: true } },
    };
  }
  if (operation.kind === "start" && error.code === Refusal.probeRequired && operation.params.probe !== true) {
    // The probe is a run of its own: it does not start the job after it (the verdict decides).
    const { id, approved } = operation.params;
    return {
      kind: "confirm",
      prompt: probeRequiredPrompt(id, dataOf(error).probe),
      confirmLabel: "Run Probe",
      retry: { kind: "start", params: approved === true ? { id, approved, probe: true } : { id, probe: true } },
    };
  }
  const reason = reasonOf(error);
  const because = reason ? ` (${reason})` : "";
  return { kind: "error", message: `Arena: cannot ${operationLabel(operation)}${because}: ${refusalDetail(error)}` };
}

/**
 * 1012 and 1011 (contract 7.1): a start that would overwrite work asks, saying
 * the step and when; "yes" starts over from step 0 (1012: `resume: false`,
 * no `startStep`) or confirms the step asked for (1011: `confirm: true`).
 */
function decideOverwrite(operation: Operation, error: RpcError, now: Date): Decision | undefined {
  if (operation.kind !== "start") {
    return undefined;
  }
  const params = operation.params;
  if (error.code === Refusal.alreadyFinished && params.resume !== false) {
    const { startStep: _dropped, ...rest } = params;
    void _dropped;
    return {
      kind: "confirm",
      prompt: finishedPrompt(params.id, dataOf(error).run, now),
      confirmLabel: "Start over from step 0",
      retry: { kind: "start", params: { ...rest, resume: false } },
    };
  }
  if (error.code === Refusal.checkpointMismatch && params.confirm !== true) {
    const data = dataOf(error);
    return {
      kind: "confirm",
      prompt: mismatchPrompt(params.id, data, now),
      confirmLabel: `Start at step ${scalar(data.asked ?? params.startStep)}`,
      retry: { kind: "start", params: { ...params, confirm: true } },
    };
  }
  return undefined;
}

/** Recognises a JSON-RPC error object thrown by a client library. */
export function asRpcError(thrown: unknown): RpcError | undefined {
  if (thrown === null || typeof thrown !== "object") {
    return undefined;
  }
  const candidate = thrown as Data;
  if (typeof candidate.code === "number" && typeof candidate.message === "string") {
    return { code: candidate.code, message: candidate.message, data: candidate.data };
  }
  return undefined;
}
