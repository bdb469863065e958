// What the Training Room's routes answer (contract 7.4): arena-ls's RunInfo, JobInfo and log lines
// in the shapes AIDE's page and the SOP's TrainingManager use (moved out of training-arena.mjs).
import { stripAnsi } from "./log-follower.mjs";
import { isAnnouncement, isLive, rebootOffers } from "./core.mjs";

function finite(value) {
  return typeof value === "number" && Number.isFinite(value);
}

/** A log line as AIDE's page reads it: `{id, line, at, seq, stream}`, stderr prefixed `stderr: `. */
export function pageLine(jobId, line) {
  const text = stripAnsi(line.text ?? "");
  return { id: jobId, line: line.stream === "stderr" ? `stderr: ${text}` : text, at: line.at ?? null, seq: line.seq, stream: line.stream };
}

/**
 * The lines of `status.logs`: a person reads them (the SOP's page shows the
 * last one), so the trainer's well-formed `@arena {...}` announcements are
 * skipped, unless they are all there is (a trainer that prints nothing else
 * still shows that it is alive). The SSE route keeps every line.
 */
export function statusLogLines(lines, limit) {
  const readable = lines.filter((line) => !isAnnouncement(line));
  return (readable.length > 0 ? readable : lines).slice(-limit);
}

/** `status.active` (7.4), with the extra fields the panel shows (speed, checkpoint, insights). */
export function activeShape(run) {
  if (!isLive(run)) {
    return null;
  }
  return {
    id: run.jobId,
    name: run.jobName ?? run.jobId,
    status: run.status,
    pid: run.pid ?? null,
    runId: run.runId,
    step: run.step ?? null,
    totalSteps: run.totalSteps ?? null,
    loss: run.loss ?? null,
    etaSeconds: run.etaSeconds ?? null,
    stepsPerSecond: run.stepsPerSecond ?? null,
    startedAt: run.startedAt ?? null,
    lastCheckpoint: run.lastCheckpoint ?? null,
    restarts: run.restarts ?? 0,
    stalled: run.stalled === true,
    waitingFor: run.waitingFor ?? null,
    insights: run.insights ?? [],
    record: run.record ?? null,
    resumedFrom: run.resumedFrom ?? null,
    // Contract 8.3: true, false, or null (why is in the run's log); absent when the server does not say.
    ...("keepAwake" in run ? { keepAwake: run.keepAwake } : {}),
  };
}

/** The newest run, whatever its status: how a page learns that a run crashed or stopped on battery. */
export function runShape(run) {
  if (!run) {
    return null;
  }
  return {
    id: run.jobId,
    runId: run.runId,
    status: run.status,
    exitCode: run.exitCode ?? null,
    signal: run.signal ?? null,
    stoppedBy: run.stoppedBy ?? null,
    failure: run.failure ?? null,
    lost: run.lost ?? null,
    step: run.step ?? null,
    totalSteps: run.totalSteps ?? null,
    lastCheckpoint: run.lastCheckpoint ?? null,
    startedAt: run.startedAt ?? null,
    endedAt: run.endedAt ?? null,
    afterReboot: run.afterReboot ?? null,
    record: run.record ?? null,
    resumedFrom: run.resumedFrom ?? null,
  };
}

/** The run succeeded at its last step (`step == totalSteps`): resuming it trains nothing (arena-ls answers 1012). */
export function finishedAllSteps(run) {
  if (!run || run.status !== "succeeded" || !finite(run.totalSteps) || run.totalSteps <= 0) {
    return false;
  }
  const step = Math.max(finite(run.step) ? run.step : 0, finite(run.lastCheckpoint?.step) ? run.lastCheckpoint.step : 0);
  return step >= run.totalSteps;
}

/** The job's newest run among `runs` (RunInfo, newest last or with startedAt), or null. */
function newestRunOf(jobId, runs) {
  let newest = null;
  for (const run of runs) {
    if (run?.jobId === jobId && (newest === null || String(run.startedAt ?? "") >= String(newest.startedAt ?? ""))) {
      newest = run;
    }
  }
  return newest;
}

/**
 * Contract 8.3: the runs a restart of the machine interrupted that a person may resume, newest
 * first: `{runId, id, offer: "Resume from step N", message, startStep}`. The page's button posts
 * `/api/training/start {id, approved: true, resume: true, startStep}`.
 */
export function interruptedShape(runs) {
  return rebootOffers(runs ?? []).map((offer) => ({
    runId: offer.runId,
    id: offer.jobId,
    offer: offer.label,
    message: offer.message.replace(/^Arena: /, ""),
    startStep: offer.params.startStep,
  }));
}

export function jobShape(job, runs = []) {
  const last = newestRunOf(job.id, runs);
  return {
    id: job.id,
    name: job.name ?? job.id,
    kind: job.kind ?? null,
    status: job.status ?? null,
    runnable: job.runnable === true,
    blockedBy: job.blockedBy ?? [],
    lastCheckpoint: job.lastCheckpoint ?? null,
    probe: job.probe ?? null,
    // The panel offers "Resume" only when resuming can train something (issue 38: no "Resume from step 600" on a finished job).
    finished: finishedAllSteps(last),
    totalSteps: last?.totalSteps ?? null,
    // Its last run, for the finished job's question in every client's words (1012: "… in run R (ended …)").
    lastRunId: last?.runId ?? null,
    endedAt: last?.endedAt ?? null,
  };
}
