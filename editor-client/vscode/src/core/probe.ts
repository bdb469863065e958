/**
 * The VRAM probe as the client shows and follows it (contract section 6.3):
 * `arena/start {id, probe: true}` runs the job's probe as a run of job
 * `<id>.probe`; when that run ends the server records the verdict, which
 * `arena/status` then lists as `JobInfo.probe`. No editor API here.
 */
import type { JobInfo, ProbeVerdict } from "./protocol";

/** The job id of a job's probe runs. */
export const PROBE_SUFFIX = ".probe";

/** The job a probe run belongs to (`tiny-lm` for `tiny-lm.probe`), else undefined. */
export function probedJobOf(runJobId: string): string | undefined {
  return runJobId.endsWith(PROBE_SUFFIX) && runJobId.length > PROBE_SUFFIX.length
    ? runJobId.slice(0, -PROBE_SUFFIX.length)
    : undefined;
}

function isVerdict(probe: unknown): probe is ProbeVerdict {
  return probe !== null && typeof probe === "object" && typeof (probe as ProbeVerdict).ok === "boolean";
}

function peakOf(probe: ProbeVerdict): string | undefined {
  const peak = probe.peakVramMb;
  return typeof peak === "number" && Number.isFinite(peak) ? `${Math.round(peak)} MB` : undefined;
}

/** `probe passed (3000 MB)`, `probe failed (6000 MB)`, `probe failed` (no GPU read); undefined when never probed. */
export function probeSummary(probe: unknown): string | undefined {
  if (!isVerdict(probe)) {
    return undefined;
  }
  const peak = peakOf(probe);
  return `probe ${probe.ok ? "passed" : "failed"}${peak ? ` (${peak})` : ""}`;
}

export interface VerdictMessage {
  level: "info" | "warning";
  text: string;
}

/** The message shown when a probe's verdict arrives. */
export function verdictMessage(jobId: string, probe: ProbeVerdict): VerdictMessage {
  const summary = probeSummary(probe) ?? "probe finished";
  const why = typeof probe.message === "string" && probe.message !== "" ? `: ${probe.message}` : "";
  return { level: probe.ok ? "info" : "warning", text: `Arena: ${jobId} ${summary}${why}` };
}

/** Whether `after` is a verdict recorded since `before` was read. */
export function isNewVerdict(before: unknown, after: unknown): after is ProbeVerdict {
  if (!isVerdict(after)) {
    return false;
  }
  if (!isVerdict(before)) {
    return true;
  }
  return after.at !== before.at || after.ok !== before.ok || after.peakVramMb !== before.peakVramMb;
}

export interface WaitOptions {
  attempts: number;
  delayMs: number;
  sleep?: (ms: number) => Promise<void>;
}

const sleepFor = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Reads `JobInfo.probe` until a verdict newer than `before` is there (the
 * server records it just after the probe run ends), at most `attempts`
 * times; undefined when none came.
 */
export async function waitForVerdict(
  read: () => Promise<ProbeVerdict | null | undefined>,
  before: ProbeVerdict | null | undefined,
  options: WaitOptions,
): Promise<ProbeVerdict | undefined> {
  const sleep = options.sleep ?? sleepFor;
  for (let attempt = 0; attempt < options.attempts; attempt++) {
    const probe = await read();
    if (isNewVerdict(before, probe)) {
      return probe;
    }
    await sleep(options.delayMs);
  }
  return undefined;
}

/** The train jobs a probe can run for (a probe measures a trainer). */
export function probeCandidates(jobs: readonly JobInfo[]): JobInfo[] {
  return jobs.filter((job) => job.kind === "train");
}

/** The question asked on refusal 1010: why the start needs a probe, and whether to run it now. */
export function probeRequiredPrompt(jobId: string, probe: unknown): string {
  const why = isVerdict(probe)
    ? `its last probe failed${typeof probe.message === "string" && probe.message !== "" ? `: ${probe.message}` : ""}`
    : "no probe of its current trainer";
  return `${jobId} needs a passing VRAM probe before it runs (${why}). Run the probe now?`;
}
