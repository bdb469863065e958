/**
 * Text the client shows: the status-bar items, the job picker, the status
 * report and log lines. No editor API here, so Node tests cover it.
 */
import { lostLine } from "./workLost";
import { insightBadge, insightLines } from "./insights";
import { keepAwakeText } from "./keepAwake";
import { interruptedLine, rebootOffers, recordLines } from "./laptop";
import { probeSummary } from "./probe";
import { resumedFromLine, skippedLines } from "./resumedFrom";
import { isLive } from "./protocol";
import type { ClusterHealth, Health, JobInfo, LogLine, RunInfo, RunStatus, StatusResult } from "./protocol";

const ICONS: Readonly<Record<RunStatus, string>> = {
  starting: "⟳",
  running: "⟳",
  restarting: "↻",
  stopping: "■",
  stopped: "■",
  succeeded: "✓",
  crashed: "✗",
  lost: "?",
};

export const RUN_ITEM_TEXT = "▶ Run";
export const STOP_ITEM_TEXT = "■ Stop";

function finite(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

/** `45s`, `3m`, `1h05m`: short enough for a status bar. */
export function formatEta(seconds: unknown): string | undefined {
  if (!finite(seconds) || seconds < 0) {
    return undefined;
  }
  const whole = Math.round(seconds);
  if (whole < 60) {
    return `${whole}s`;
  }
  const minutes = Math.round(whole / 60);
  if (minutes < 60) {
    return `${minutes}m`;
  }
  const hours = Math.floor(minutes / 60);
  return `${hours}h${String(minutes % 60).padStart(2, "0")}m`;
}

export function formatLoss(loss: unknown): string | undefined {
  if (typeof loss !== "number") {
    return undefined;
  }
  if (!Number.isFinite(loss)) {
    return String(loss).toLowerCase();
  }
  return Math.abs(loss) >= 100 ? loss.toFixed(0) : loss.toFixed(2);
}

/** Whole percent of the run done, when the trainer announced a total. */
export function percentDone(run: RunInfo): number | undefined {
  if (!finite(run.step) || !finite(run.totalSteps) || run.totalSteps <= 0) {
    return undefined;
  }
  return Math.min(100, Math.max(0, Math.floor((run.step / run.totalSteps) * 100)));
}

function progressPart(run: RunInfo): string | undefined {
  const percent = percentDone(run);
  if (percent !== undefined) {
    return `${run.step}/${run.totalSteps} (${percent}%)`;
  }
  return finite(run.step) ? `step ${run.step}` : undefined;
}

/** The job, and where it runs when that is a cluster: `tiny-lm @ lab`. */
export function runPlace(run: Pick<RunInfo, "jobId" | "cluster">): string {
  return run.cluster?.name ? `${run.jobId} @ ${run.cluster.name}` : run.jobId;
}

/** The status-bar item of a run: `⟳ tiny-lm 900/2000 (45%) · loss 2.31 · ETA 3m` (`tiny-lm @ lab` on a cluster). */
export function runStatusText(run: RunInfo): string {
  const head = [ICONS[run.status] ?? "?", runPlace(run)];
  if (run.status !== "running") {
    head.push(run.status);
  }
  const progress = progressPart(run);
  if (progress) {
    head.push(progress);
  }
  const parts = [head.join(" ")];
  const loss = formatLoss(run.loss);
  if (loss !== undefined) {
    parts.push(`loss ${loss}`);
  }
  const eta = isLive(run) ? formatEta(run.etaSeconds) : undefined;
  if (eta !== undefined) {
    parts.push(`ETA ${eta}`);
  }
  if (run.stalled === true) {
    parts.push("stalled");
  }
  return parts.join(" · ");
}

/**
 * The run's status-bar item: `runStatusText`, then the insight that matters
 * most as an icon and its kind (`… · $(warning) loss-spike +1`), so the run's
 * own text keeps its place at the start.
 */
export function runItemText(run: RunInfo): string {
  const badge = insightBadge(run);
  const text = runStatusText(run);
  return badge ? `${text} · ${badge}` : text;
}

/**
 * The hover of the run's status-bar item: everything worth a glance, and every insight's message.
 * `keepAwakeReason`: why the run cannot keep the machine awake (its log's line), when known.
 */
export function runTooltip(run: RunInfo, keepAwakeReason?: string): string {
  const lines = [`${runPlace(run)} (run ${run.runId}): ${run.status}`];
  if (finite(run.stepsPerSecond)) {
    lines.push(`${run.stepsPerSecond.toFixed(1)} steps/s`);
  }
  if (run.lastCheckpoint) {
    lines.push(`last checkpoint: step ${run.lastCheckpoint.step} (${run.lastCheckpoint.path})`);
  } else if (isLive(run)) {
    lines.push("no checkpoint yet");
  }
  const resumed = resumedFromLine(run.resumedFrom);
  if (resumed) {
    lines.push(resumed, ...skippedLines(run.resumedFrom));
  }
  if (finite(run.restarts) && run.restarts > 0) {
    lines.push(`restarts: ${run.restarts}`);
  }
  if (run.failure) {
    lines.push(`failure: ${run.failure.kind}${run.failure.evidence ? ` (${run.failure.evidence})` : ""}`);
  }
  if (run.stoppedBy) {
    lines.push(`stopped by: ${run.stoppedBy}`);
  }
  const lost = lostLine(run);
  if (lost) {
    lines.push(`lost: ${lost}`);
  }
  if (finite(run.exitCode)) {
    lines.push(`exit code: ${run.exitCode}`);
  }
  const interrupted = interruptedLine(run);
  if (interrupted) {
    lines.push(interrupted);
  }
  const awake = keepAwakeText(run, keepAwakeReason);
  if (awake) {
    lines.push(awake);
  }
  lines.push(...recordLines(run.record));
  lines.push(...insightLines(run));
  return lines.join("\n");
}

export interface JobPick {
  jobId: string;
  label: string;
  description: string;
  detail?: string;
  runnable: boolean;
}

/** Why a job cannot run, one entry per blocking diagnostic (or its status when none is listed). */
export function blockedList(job: JobInfo): string[] {
  const reasons = (job.blockedBy ?? []).map((item) => (item.code ? `${item.code}: ${item.message}` : item.message));
  if (reasons.length > 0) {
    return reasons;
  }
  return [job.status === "disabled" ? "disabled in the manifest" : "not runnable"];
}

/**
 * A job's kind as shown. The server lists a job whose manifest entry is
 * invalid with `kind: null, status: null` and its errors: that is not a `task`.
 */
export function kindLabel(job: JobInfo): string {
  if (typeof job.kind === "string" && job.kind !== "") {
    return job.kind;
  }
  return !job.runnable && (job.status === null || job.status === undefined) ? "invalid manifest entry" : "task";
}

/** The codes of the blocking diagnostics, in order, each once. */
function blockingCodes(job: JobInfo): string[] {
  const codes = (job.blockedBy ?? []).map((item) => item.code).filter((code): code is string => typeof code === "string" && code !== "");
  return [...new Set(codes)];
}

/**
 * The picker's second line of a blocked job, short enough to fit: the only
 * reason when there is one, else how many and their codes; the whole list is
 * one Enter away (`blockedDialog`). It does not repeat "blocked": the
 * separator above says so.
 */
export function blockedSummary(job: JobInfo): string {
  const reasons = blockedList(job);
  if (reasons.length === 1) {
    return `${reasons[0]} · Enter: details`;
  }
  const codes = blockingCodes(job);
  const named = codes.length > 0 ? `: ${codes.join(", ")}` : "";
  return `${reasons.length} reasons${named} · Enter: all of them`;
}

export interface BlockedDialog {
  message: string;
  /** Every reason on its own line, whole. */
  detail: string;
}

/** The modal shown when a blocked job is picked: why it cannot run, every reason in full. */
export function blockedDialog(job: JobInfo): BlockedDialog {
  const reasons = blockedList(job);
  const count = reasons.length === 1 ? "1 reason" : `${reasons.length} reasons`;
  return {
    message: `${job.name ?? job.id} cannot run (${count})`,
    detail: reasons.map((reason) => `• ${reason}`).join("\n"),
  };
}

/**
 * The picker's entries: runnable jobs first, then the blocked ones with their
 * reasons. Each shows its last VRAM probe (`probe passed (3000 MB)`); the
 * probe picker also says when a job was never probed.
 */
export function jobPicks(jobs: readonly JobInfo[], purpose: "run" | "probe" = "run"): JobPick[] {
  const pick = (job: JobInfo): JobPick => {
    const description = [job.id, kindLabel(job)];
    if (job.status === "approval-required") {
      description.push("needs approval");
    }
    const probe = probeSummary(job.probe) ?? (purpose === "probe" ? "not probed yet" : undefined);
    if (probe) {
      description.push(probe);
    }
    const entry: JobPick = {
      jobId: job.id,
      label: job.runnable ? `▶ ${job.name ?? job.id}` : `⊘ ${job.name ?? job.id}`,
      description: description.join(" · "),
      runnable: job.runnable,
    };
    if (!job.runnable) {
      entry.detail = blockedSummary(job);
    }
    return entry;
  };
  return [...jobs.filter((job) => job.runnable).map(pick), ...jobs.filter((job) => !job.runnable).map(pick)];
}

function formatMb(mb: number): string {
  return mb >= 1024 ? `${(mb / 1024).toFixed(1)} GB` : `${Math.round(mb)} MB`;
}

function counted(value: number | null | undefined, noun: string): string {
  return `${value ?? "?"} ${noun}${value === 1 ? "" : "s"}`;
}

/** A cluster's health line: `Cluster lab: 1 node, 2 CPUs, 1 GPU (A100)`, its error, or not sampled yet. */
export function clusterHealthLine(cluster: ClusterHealth): string {
  const head = `Cluster ${cluster.name}: `;
  if (cluster.error) {
    return `${head}error: ${cluster.error}`;
  }
  if (cluster.nodes === null || cluster.nodes === undefined) {
    return `${head}not sampled yet`;
  }
  const counts = [counted(cluster.nodes, "node"), counted(cluster.cpus, "CPU"), counted(cluster.gpus, "GPU")].join(", ");
  const names = cluster.gpuNames ?? [];
  return `${head}${counts}${names.length > 0 ? ` (${names.join(", ")})` : ""}`;
}

/** The health lines of the status report: RAM, CPU, battery, GPUs and the manifest's clusters. */
export function healthLines(health: Health | null | undefined): string[] {
  if (!health) {
    return ["health: unknown"];
  }
  const lines: string[] = [];
  if (health.ram) {
    lines.push(`RAM: ${formatMb(health.ram.availableMb)} free of ${formatMb(health.ram.totalMb)} (${health.ram.percent}% used)`);
  }
  if (health.cpu) {
    lines.push(`CPU: ${health.cpu.percent}% of ${health.cpu.count} cores`);
  }
  lines.push(
    health.battery
      ? `Battery: ${health.battery.percent}%${health.battery.pluggedIn ? ", plugged in" : ", on battery"}`
      : "Battery: none",
  );
  const gpus = health.gpus ?? [];
  if (gpus.length === 0) {
    lines.push(`GPUs: none${health.gpuError ? ` (${health.gpuError})` : ""}`);
  }
  for (const gpu of gpus) {
    const memory =
      finite(gpu.memoryUsedMb) && finite(gpu.memoryTotalMb)
        ? `, ${formatMb(gpu.memoryUsedMb)} / ${formatMb(gpu.memoryTotalMb)}`
        : "";
    const load = finite(gpu.utilization) ? `, ${gpu.utilization}% busy` : "";
    const heat = finite(gpu.temperature) ? `, ${gpu.temperature}°C` : "";
    lines.push(`GPU ${gpu.index}: ${gpu.name}${load}${memory}${heat}`);
  }
  lines.push(...(health.clusters ?? []).map(clusterHealthLine));
  return lines;
}

/** The whole `Arena: Show Status` report, plain text; `keepAwakeReason` as `runTooltip`'s, of the active run. */
export function statusReport(status: StatusResult, keepAwakeReason?: string): string {
  const lines: string[] = [];
  lines.push(status.active ? `Active run: ${runStatusText(status.active)}` : "Active run: none");
  if (status.active) {
    lines.push(...runTooltip(status.active, keepAwakeReason).split("\n").map((line) => `  ${line}`));
  }
  lines.push("", "Jobs:");
  const jobs = status.jobs ?? [];
  if (jobs.length === 0) {
    lines.push("  (none)");
  }
  for (const job of jobs) {
    const probe = probeSummary(job.probe);
    const probed = probe ? ` · ${probe}` : "";
    if (job.runnable) {
      lines.push(`  ▶ ${job.id} (${kindLabel(job)}) ${job.status ?? "ready"}${probed}`);
    } else {
      lines.push(`  ⊘ ${job.id} (${kindLabel(job)})${probed} blocked:`, ...blockedList(job).map((reason) => `      ${reason}`));
    }
  }
  const offers = rebootOffers(status.runs ?? []);
  if (offers.length > 0) {
    lines.push("", "Interrupted by a restart of the machine:");
    lines.push(...offers.map((offer) => `  ${offer.jobId} [${offer.runId}]: ${offer.label} (Arena: Run Job)`));
  }
  const recent = (status.runs ?? []).slice(-5);
  if (recent.length > 0) {
    lines.push("", "Recent runs:");
    lines.push(...recent.map((run) => `  ${runStatusText(run)}  [${run.runId}]`));
  }
  lines.push("", "Health:", ...healthLines(status.health).map((line) => `  ${line}`));
  return `${lines.join("\n")}\n`;
}

/** A log line for an output channel: stderr and the supervisor's own lines are marked. */
export function formatLogLine(line: LogLine): string {
  switch (line.stream) {
    case "stderr":
      return `[stderr] ${line.text}`;
    case "arena":
      return `[arena] ${line.text}`;
    default:
      return line.text;
  }
}

export function logChannelName(jobId: string): string {
  return `Arena: ${jobId}`;
}
