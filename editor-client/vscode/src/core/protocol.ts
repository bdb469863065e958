/**
 * The shapes of the arena-ls contract (section 4) that the client reads.
 *
 * Only the fields the client uses are typed; everything else passes through.
 * Fields the server may send as null are optional-or-null, because other
 * clients (Neovim 0.7) drop nulls and the server may do the same.
 */

import type { ResumedFrom } from "./resumedFrom";

export const Methods = {
  start: "arena/start",
  stop: "arena/stop",
  status: "arena/status",
  logs: "arena/logs",
  metrics: "arena/metrics",
  log: "arena/log",
  statusChanged: "arena/statusChanged",
} as const;

export type RunStatus =
  | "starting"
  | "running"
  | "stopping"
  | "stopped"
  | "succeeded"
  | "restarting"
  | "crashed"
  | "lost";

export interface Checkpoint {
  step: number;
  path: string;
  at?: string | null;
}

export interface Failure {
  kind: string;
  evidence?: string | null;
}

/** One of `RunInfo.insights` (contract section 6.3): a health signal that holds now. */
export interface Insight {
  kind: string;
  /** `info` or `warning` (kept a string: a later server may add one). */
  severity: string;
  message: string;
  since?: string | null;
}

/** `JobInfo.probe`: the verdict of the last VRAM probe of the trainer as it is now. */
export interface ProbeVerdict {
  ok: boolean;
  peakVramMb?: number | null;
  at?: string | null;
  message?: string | null;
}

export interface RunInfo {
  runId: string;
  jobId: string;
  status: RunStatus;
  startedAt?: string | null;
  endedAt?: string | null;
  exitCode?: number | null;
  stoppedBy?: string | null;
  failure?: Failure | null;
  restarts?: number | null;
  step?: number | null;
  totalSteps?: number | null;
  loss?: number | null;
  stepsPerSecond?: number | null;
  etaSeconds?: number | null;
  stalled?: boolean | null;
  lastCheckpoint?: Checkpoint | null;
  /** Contract 7.1: the work a stop or kill lost since the last checkpoint, or null when unknown. */
  lost?: { steps: number; seconds: number } | null;
  logPath?: string | null;
  insights?: Insight[] | null;
  /** Where the run runs (contract 6.2): null on this machine. */
  cluster?: ClusterPlace | null;
  /** Contract 8.3: a run a restart of the machine interrupted (`failure.kind` `machine-restarted`). */
  afterReboot?: AfterReboot | null;
  /** Contract 8.3: the code, interpreter, command and settings the run trained with. */
  record?: RunRecord | null;
  /** Contract 8.2: the verified checkpoint the run resumed from, and the newer ones skipped. */
  resumedFrom?: ResumedFrom | null;
  /** Contract 8.3: the agent keeps the machine awake (true), was told not to (false), or cannot (null: why is in the log). */
  keepAwake?: boolean | null;
}

export interface AfterReboot {
  /** `watchdog.afterReboot`: `ask`, `resume` or `never`. */
  policy: string;
  step?: number | null;
  /** `Resume from step N` while a person may resume the run; null once resumed or superseded. */
  offer?: string | null;
  resumedBy?: string | null;
  newerRun?: string | null;
  /** Why the server's own resume (`watchdog.afterReboot` `resume`) did not happen. */
  problem?: string | null;
  /** Contract 8.1: the checkpoint's path when the job's `resume.args` name `{path}` (the step alone would mislead). */
  path?: string | null;
}

export interface RunRecord {
  git?: { commit?: string | null; dirty?: boolean; diffSha256?: string | null } | null;
  python?: { path?: string; version?: string | null } | null;
  argv?: string[];
  manifestSha256?: string | null;
  host?: string;
  settings?: Record<string, unknown>;
}

export interface ClusterPlace {
  name: string;
  kind: string;
  address?: string | null;
  submissionId?: string | null;
}

export interface Range {
  start: { line: number; character: number };
  end: { line: number; character: number };
}

export interface BlockingDiagnostic {
  code?: string | null;
  message: string;
  uri?: string | null;
  range?: Range | null;
}

export interface JobInfo {
  id: string;
  name?: string | null;
  kind?: string | null;
  status?: string | null;
  runnable: boolean;
  blockedBy?: BlockingDiagnostic[] | null;
  probe?: ProbeVerdict | null;
  /** Contract 7.1: the job's last checkpoint across its runs. */
  lastCheckpoint?: Checkpoint | null;
  /** Contract 8.1: the job's `resume.args` name `{path}`: a resume starts from the checkpoint's path. */
  resumesFromPath?: boolean | null;
}

export interface LogLine {
  seq: number;
  stream: "stdout" | "stderr" | "arena";
  text: string;
  at?: string | null;
}

export interface Gpu {
  index: number;
  name: string;
  utilization?: number | null;
  memoryUsedMb?: number | null;
  memoryTotalMb?: number | null;
  temperature?: number | null;
}

/** One of `Health.clusters` (contract section 6.2): a cluster the manifest declares, as Ray reports it. */
export interface ClusterHealth {
  name: string;
  nodes?: number | null;
  cpus?: number | null;
  gpus?: number | null;
  gpuNames?: string[] | null;
  error?: string | null;
  at?: string | null;
}

export interface Health {
  at?: string | null;
  ram?: { totalMb: number; availableMb: number; percent: number } | null;
  cpu?: { percent: number; count: number } | null;
  battery?: { percent: number; pluggedIn: boolean } | null;
  gpus?: Gpu[] | null;
  gpuError?: string | null;
  clusters?: ClusterHealth[] | null;
}

export interface StatusResult {
  active?: RunInfo | null;
  runs?: RunInfo[] | null;
  jobs?: JobInfo[] | null;
  health?: Health | null;
  logs?: LogLine[] | null;
}

export interface LogsResult {
  runId?: string | null;
  lines?: LogLine[] | null;
  cursor?: unknown;
  done?: boolean | null;
}

export interface LogNotification {
  runId: string;
  lines: LogLine[];
}

export interface StartParams {
  id: string;
  approved?: boolean;
  resume?: "auto" | boolean;
  startStep?: number;
  /** Contract 7.1: the person agreed to what a 1011 refusal warned of. */
  confirm?: boolean;
  dryRun?: boolean;
  probe?: boolean;
}

export interface StopParams {
  id?: string;
  runId?: string;
  kill?: boolean;
  confirm?: boolean;
  graceSeconds?: number;
  wait?: boolean;
}

/** The statuses of a run whose process tree may still be alive. */
const LIVE_STATUSES: ReadonlySet<RunStatus> = new Set<RunStatus>([
  "starting",
  "running",
  "stopping",
  "restarting",
]);

export function isLive(run: RunInfo | null | undefined): run is RunInfo {
  return run != null && LIVE_STATUSES.has(run.status);
}
