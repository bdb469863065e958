/**
 * Running a job that has a checkpoint: resume from it, or start fresh.
 *
 * The server resumes a `train` job from its recorded checkpoint by default
 * (`resume: "auto"`), so running a finished job again trains nothing. The
 * client asks first, and sends `resume: false` for a fresh start or
 * `resume: true` with the step it showed for a resume.
 */
import type { JobInfo, RunInfo, StartParams } from "./protocol";

export interface CheckpointSeen {
  step: number;
  totalSteps?: number;
  /** The checkpoint's path as announced (absent when it announced none). */
  path?: string;
}

export interface ResumeOffer {
  step: number;
  /** True when the checkpoint is at (or past) the job's last step: a resume would train nothing. */
  finished: boolean;
  prompt: string;
  resumeLabel: string;
  freshLabel: string;
  /** The buttons in the order to show them: the useful one first. */
  labels: [string, string];
}

function finite(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

/** The newest checkpoint any run of the job announced (`runs` is oldest first, as `arena/status` sends it). */
export function lastCheckpointOf(jobId: string, runs: readonly RunInfo[]): CheckpointSeen | undefined {
  for (let index = runs.length - 1; index >= 0; index--) {
    const run = runs[index];
    if (run.jobId === jobId && run.lastCheckpoint && finite(run.lastCheckpoint.step)) {
      const seen: CheckpointSeen = { step: run.lastCheckpoint.step };
      if (finite(run.totalSteps)) {
        seen.totalSteps = run.totalSteps;
      }
      if (typeof run.lastCheckpoint.path === "string" && run.lastCheckpoint.path) {
        seen.path = run.lastCheckpoint.path;
      }
      return seen;
    }
  }
  return undefined;
}

/** The question to ask before starting `job`, or undefined when there is nothing to resume. */
export function resumeOffer(job: JobInfo, runs: readonly RunInfo[]): ResumeOffer | undefined {
  if (job.kind !== "train") {
    return undefined;
  }
  const checkpoint = lastCheckpointOf(job.id, runs);
  if (!checkpoint) {
    return undefined;
  }
  const name = job.name ?? job.id;
  const { step, totalSteps, path } = checkpoint;
  const finished = totalSteps !== undefined && totalSteps > 0 && step >= totalSteps;
  // Contract 8.1: a job resumed from the checkpoint's path ({path}) is told which file it resumes from.
  const named = job.resumesFromPath === true && path !== undefined ? ` (${path})` : "";
  const resumeLabel = `Resume from step ${step}${named}`;
  const freshLabel = "Start fresh";
  const where = `${totalSteps !== undefined ? `step ${step} of ${totalSteps}` : `step ${step}`}${named}`;
  const prompt = finished
    ? `${name} has finished: its checkpoint is at ${where}, so resuming trains nothing. Start it fresh?`
    : `${name} has a checkpoint at ${where}. Resume from it, or start fresh from step 0?`;
  return {
    step,
    finished,
    prompt,
    resumeLabel,
    freshLabel,
    labels: finished ? [freshLabel, resumeLabel] : [resumeLabel, freshLabel],
  };
}

/** The `arena/start` params for the answer; undefined when the dialog was dismissed. */
export function startParamsFor(jobId: string, offer: ResumeOffer | undefined, answer: string | undefined): StartParams | undefined {
  if (!offer) {
    return { id: jobId };
  }
  if (answer === offer.freshLabel) {
    return { id: jobId, resume: false };
  }
  if (answer === offer.resumeLabel) {
    return { id: jobId, resume: true, startStep: offer.step };
  }
  return undefined;
}
