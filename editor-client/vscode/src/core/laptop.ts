/**
 * The laptop (contract 8.3): a run a restart of the machine interrupted, and the run record.
 *
 * `RunInfo.afterReboot` is set on a run that ended `crashed` with `failure.kind`
 * `machine-restarted`; its `offer` ("Resume from step N") is set while a person may resume
 * it (`watchdog.afterReboot` `ask`, or `resume` when the server's own resume did not
 * happen). Taking it starts the job with `resume: true` at the offered step.
 * `RunInfo.record` says which code, interpreter and settings the run trained with.
 */
import type { RunInfo, RunRecord, StartParams } from "./protocol";
import { say } from "./wording";

export interface RebootOffer {
  runId: string;
  jobId: string;
  /** The button: the server's `offer`, `Resume from step N`. */
  label: string;
  message: string;
  params: StartParams;
}

function finite(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

/** The offer of one run, or undefined when it has none (not interrupted, resumed, superseded, `never`). */
export function rebootOffer(run: RunInfo): RebootOffer | undefined {
  const info = run.afterReboot;
  if (!info || typeof info.offer !== "string" || info.offer === "" || !finite(info.step)) {
    return undefined;
  }
  const why = info.problem ? say("rebootNotResumed", { problem: String(info.problem) }) : "";
  const from = typeof info.path === "string" && info.path ? say("rebootFrom", { path: info.path }) : "";
  const question = say("rebootOffer", { job: run.jobId, runId: run.runId, why, offer: info.offer, checkpointFrom: from });
  return {
    runId: run.runId,
    jobId: run.jobId,
    label: info.offer,
    message: `Arena: ${question}`,
    params: { id: run.jobId, resume: true, startStep: info.step },
  };
}

/** Every run's offer, newest run first (`runs` is oldest first, as `arena/status` sends it). */
export function rebootOffers(runs: readonly RunInfo[]): RebootOffer[] {
  const offers: RebootOffer[] = [];
  for (let index = runs.length - 1; index >= 0; index--) {
    const offer = rebootOffer(runs[index]);
    if (offer) {
      offers.push(offer);
    }
  }
  return offers;
}

/** The offers not shown yet; each is shown once per editor session (`shown` remembers them). */
export function newRebootOffers(runs: readonly RunInfo[], shown: Set<string>): RebootOffer[] {
  const fresh = rebootOffers(runs).filter((offer) => !shown.has(offer.runId));
  for (const offer of fresh) {
    shown.add(offer.runId);
  }
  return fresh;
}

/** `abc1234` or `abc1234 (dirty)` of the run's commit; undefined without a record or a repository. */
export function commitText(record: RunRecord | null | undefined): string | undefined {
  const git = record?.git;
  if (!git) {
    return undefined;
  }
  const commit = typeof git.commit === "string" && git.commit !== "" ? git.commit.slice(0, 12) : "no commit yet";
  return git.dirty ? `${commit} (dirty)` : commit;
}

/** The run record in a few lines for the run's hover and the status report. */
export function recordLines(record: RunRecord | null | undefined): string[] {
  if (!record) {
    return [];
  }
  const lines = [`code: ${commitText(record) ?? "not in a git repository"}`];
  if (record.git?.dirty && record.git.diffSha256) {
    lines.push(`uncommitted diff: sha256 ${record.git.diffSha256.slice(0, 16)}`);
  }
  const python = record.python;
  if (python?.path) {
    lines.push(`python: ${python.path}${python.version ? ` (${python.version})` : ""}`);
  }
  if (record.host) {
    lines.push(`host: ${record.host}`);
  }
  return lines;
}

/** The interrupted run's line in the hover and the report, offer or not. */
export function interruptedLine(run: RunInfo): string | undefined {
  const info = run.afterReboot;
  if (!info) {
    return undefined;
  }
  if (info.resumedBy) {
    return `interrupted by a restart; resumed as run ${info.resumedBy}`;
  }
  if (info.offer) {
    return `interrupted by a restart: ${info.offer}${info.problem ? ` (not resumed by itself: ${info.problem})` : ""}`;
  }
  return "interrupted by a restart of the machine";
}
