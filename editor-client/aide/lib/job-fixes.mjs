/**
 * The quick fixes of a blocked job, as the daemon's routes serve them (issue 35, item 5;
 * the edits themselves are lib/fixes.mjs's). `manager` is the TrainingManager: its arena-ls
 * client, its workspace and `_arenaStatus()`.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { FixRefused, KIT_TITLE, applyPlan, fixesFor, importsKit, planEdit } from "./fixes.mjs";
import { Messages, TrainingError, httpError } from "./http-errors.mjs";

async function jobNamed(manager, id) {
  if (typeof id !== "string" || id === "") {
    throw new TrainingError(404, { error: Messages.unknown, reason: "not-allowlisted" });
  }
  const job = ((await manager._arenaStatus()).jobs ?? []).find((candidate) => candidate.id === id);
  if (!job) {
    throw new TrainingError(404, { error: Messages.unknown, reason: "not-allowlisted" });
  }
  return job;
}

async function fixesOf(manager, job) {
  try {
    return await fixesFor(manager.client, job);
  } catch (error) {
    throw httpError(error, "fixes");
  }
}

/** GET /api/training/fixes?id=JOB → `{id, fixes: [{title, codes}]}`: what the panel offers under "Cannot run". */
export async function jobFixes(manager, id) {
  const job = await jobNamed(manager, id);
  const fixes = await fixesOf(manager, job);
  return { id: job.id, fixes: fixes.map(({ title, codes }) => ({ title, codes })) };
}

/**
 * POST /api/training/fix `{id, title}` → `{id, applied, files}`. The fix is worked out again
 * from the trainer as it is now and applied by title; one no longer offered is a 409. A fix
 * that imports the kit brings the kit beside the script with it while that is offered (the
 * callback alone would pass the gates and then fail at its import): `applied` names both.
 */
export async function applyJobFix(manager, body = {}) {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new TrainingError(400, { error: "the body must be a JSON object" });
  }
  if (typeof body.title !== "string" || body.title === "") {
    throw new TrainingError(400, { error: "field `title` must name one of the job's fixes" });
  }
  const job = await jobNamed(manager, body.id);
  const offered = await fixesOf(manager, job);
  const chosen = offered.find((fix) => fix.title === body.title);
  const trainer = (job.blockedBy ?? []).find((item) => typeof item?.uri === "string" && item.uri.endsWith(".py"));
  if (!chosen || !trainer) {
    throw new TrainingError(409, { error: `"${body.title.slice(0, 200)}" is not offered for ${job.id} now: its trainer changed or the finding is gone`, reason: "fix-gone" });
  }
  try {
    const script = path.resolve(fileURLToPath(trainer.uri));
    const kit = chosen.title !== KIT_TITLE && importsKit(chosen.edit) ? offered.find((fix) => fix.title === KIT_TITLE) : undefined;
    const chosenFixes = kit ? [chosen, kit] : [chosen];
    const steps = chosenFixes.flatMap((fix) => planEdit(fix.edit, { root: manager.workspace, script }));
    const files = await applyPlan(steps);
    return {
      id: job.id,
      applied: chosenFixes.map((fix) => fix.title),
      files: files.map((file) => path.relative(manager.workspace, file).split(path.sep).join("/")),
    };
  } catch (error) {
    if (error instanceof FixRefused) {
      throw new TrainingError(409, { error: error.message, reason: "fix-refused" });
    }
    throw error;
  }
}
