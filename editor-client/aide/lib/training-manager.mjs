// The daemon's side of AIDE's Training Room: arena-ls as a child over stdio, the runs it reports,
// one log follower per run a page reads, and the operations of contract 7.4 (status, start, stop,
// logs). training-arena.mjs's TrainingArena adds the HTTP routes on top (moved out of it).
import path from "node:path";
import { ArenaClient } from "./arena-client.mjs";
import { LogFollower } from "./log-follower.mjs";
import { FollowersFull, RunFollowers } from "./run-followers.mjs";
import { newToken } from "./trust.mjs";
import { isLive } from "./core.mjs";
import { defaultArenaCommand } from "./launch.mjs";
import { Messages, TrainingError, httpError, optionalBoolean } from "./http-errors.mjs";
import { activeShape, interruptedShape, jobShape, pageLine, runShape, statusLogLines } from "./shapes.mjs";

export const DEFAULT_ORIGIN = "http://127.0.0.1:4173";
const KEEPALIVE_MS = 15_000;
const STATUS_LOG_LINES = 100;
export const JSON_PAGE_DEFAULT = 1000;
const JSON_PAGE_MAX = 5000;
/** Unknown run ids look the runs up again at most this often (a flood of bogus ids costs one arena/status). */
const RUNS_REFRESH_MS = 2000;
const RUNS_LIMIT = 500;
/** A run id as arena-ls makes them (`<job id>-YYYYMMDDTHHMMSS-<hex>`, contract 2 and runlock.new_run_id). */
export const RUN_ID_SHAPE = /^[a-z0-9][a-z0-9._-]{0,63}-\d{8}T\d{6}-[0-9a-f]{4,32}$/;

export class TrainingManager {
  /**
   * @param options.workspace   the workspace root (holds training/manifest.json)
   * @param options.arenaLs     arena-ls as an argument list (default: defaultArenaCommand())
   * @param options.settings    arena-ls settings (section `arena`)
   * @param options.origins     the page origins allowed to call (default: http://127.0.0.1:4173)
   * @param options.health      also serve GET /health (default true)
   * @param options.keepaliveMs SSE keepalive period (default 15 s)
   * @param options.bufferLines  log lines kept in memory per run (default 5000; older ones are read again from arena-ls)
   * @param options.token       the page's secret (default: 32 random bytes); `arena.token` gives it to the page's HTML
   * @param options.checkPeer   refuse connections from another account where the OS tells (default true)
   */
  constructor(options = {}) {
    if (!options.workspace) {
      throw new TypeError("TrainingArena needs { workspace }");
    }
    this.workspace = path.resolve(options.workspace);
    this.origins = new Set(options.origins ?? [DEFAULT_ORIGIN]);
    this.serveHealth = options.health !== false;
    this.keepaliveMs = options.keepaliveMs ?? KEEPALIVE_MS;
    this.bufferLines = options.bufferLines ?? 5000;
    this.logger = options.logger ?? console;
    this.token = options.token ?? newToken();
    this.checkPeer = options.checkPeer !== false;
    this._runsLookup = null;
    this._runsLookedUpAt = -Infinity;
    this.client = new ArenaClient({
      command: options.arenaLs ?? defaultArenaCommand(),
      workspace: this.workspace,
      settings: options.settings ?? {},
      env: options.env ?? process.env,
      logger: this.logger,
    });
    this.followers = new RunFollowers({
      make: (runId) => new LogFollower({ client: this.client, runId, bufferLines: this.bufferLines, logger: this.logger }),
      isLive: (runId) => this._isLiveRun(runId),
      isKnown: (runId) => this.runs.has(runId),
    });
    this.runs = new Map();
    this.streams = new Set();
    this.client.on("log", (params) => this._onLog(params));
    this.client.on("statusChanged", (run) => {
      if (run?.runId) {
        this.runs.set(run.runId, run);
        if (isLive(run)) {
          this._followLive(run.runId);
        } else {
          this._release(run.runId);
        }
      }
    });
    this.client.on("ready", () => {
      for (const follower of this.followers.values()) {
        follower.poke();
      }
    });
    this.started = this.client.start().catch((error) => this.logger.error?.(`arena-ls: ${error.message}`));
  }

  /** Resolves once arena-ls first answered `initialize`. */
  ready() {
    return this.client.whenReady();
  }

  _onLog(params) {
    // Only a run already followed is poked: a notification never makes a follower.
    if (typeof params?.runId === "string") {
      this.followers.get(params.runId)?.poke();
    }
  }

  /** A live run's log is followed from its start, so that its first lines are buffered for the page. */
  _followLive(runId) {
    try {
      this.follower(runId);
    } catch (error) {
      if (!(error instanceof TrainingError)) {
        throw error;
      }
    }
  }

  /** The one follower of a run's log, shared by its readers (lib/run-followers.mjs); 503 past the cap. */
  follower(runId) {
    try {
      return this.followers.follow(runId);
    } catch (error) {
      if (error instanceof FollowersFull) {
        throw new TrainingError(503, { error: error.message, reason: "too-many-followers" });
      }
      throw error;
    }
  }

  _isLiveRun(runId) {
    const run = this.runs.get(runId);
    return run !== undefined && isLive(run);
  }

  _release(runId) {
    this.followers.release(runId);
  }

  /** How many runs' logs are followed now (GET /health says it). */
  get followerCount() {
    return this.followers.size;
  }

  async _arenaStatus() {
    try {
      return await this.client.request("arena/status", {});
    } catch (error) {
      throw httpError(error, "status");
    }
  }

  /** GET /api/training/status: `{active, logs, jobs, health, lastRun, arena}` (7.4). */
  async status() {
    const status = await this._arenaStatus();
    const runs = status.runs ?? [];
    this._learnRuns(runs);
    const latest = status.active ?? runs[runs.length - 1] ?? null;
    const jobId = latest?.jobId ?? null;
    return {
      active: activeShape(status.active),
      logs: statusLogLines(status.logs ?? [], STATUS_LOG_LINES).map((line) => pageLine(jobId, line)),
      jobs: (status.jobs ?? []).map((job) => jobShape(job, runs)),
      health: status.health ?? null,
      lastRun: runShape(latest),
      interrupted: interruptedShape(runs),
      arena: { ready: this.client.ready, restarts: this.client.restarts },
      workspace: this.workspace,
    };
  }

  /** POST /api/training/start `{id, approved}` → `{id, status: "running", pid, runId}`. */
  async start(body = {}) {
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new TrainingError(400, { error: "the body must be a JSON object" });
    }
    if (body.approved !== true) {
      throw new TrainingError(400, { error: Messages.approval, reason: "approval-required" });
    }
    if (typeof body.id !== "string" || body.id === "") {
      throw new TrainingError(404, { error: Messages.unknown, reason: "not-allowlisted" });
    }
    const params = { id: body.id, approved: true };
    const fresh = optionalBoolean(body, "fresh");
    if (fresh === true && body.resume !== undefined && body.resume !== false) {
      throw new TrainingError(400, { error: "field `fresh: true` starts over from step 0: it cannot go with `resume`" });
    }
    // `fresh: true` is the person's "Start over from step 0" (the terminal's --fresh): arena/start `resume: false`.
    const resume = fresh === true ? false : body.resume;
    if (resume !== undefined) {
      if (resume !== true && resume !== false && resume !== "auto") {
        throw new TrainingError(400, { error: "field `resume` must be true, false or \"auto\"" });
      }
      params.resume = resume;
    }
    if (body.startStep !== undefined) {
      if (!Number.isInteger(body.startStep) || body.startStep < 0) {
        throw new TrainingError(400, { error: "field `startStep` must be a whole number from 0" });
      }
      params.startStep = body.startStep;
    }
    const confirm = optionalBoolean(body, "confirm");
    if (confirm !== undefined) {
      params.confirm = confirm;
    }
    let run;
    try {
      run = await this.client.request("arena/start", params);
    } catch (error) {
      throw httpError(error, "start", body.id);
    }
    this.runs.set(run.runId, run);
    if (isLive(run)) {
      this._followLive(run.runId);
    } else {
      // arena-ls answered with a run that already ended (its trainer could not be spawned): never say "running".
      const why = run.failure?.evidence ?? `exit code ${run.exitCode ?? "unknown"}`;
      throw new TrainingError(500, { error: `the run ended as it started (${run.status}): ${String(why).slice(0, 300)}`, reason: "launch-failed", runId: run.runId, run: runShape(run) });
    }
    return { id: run.jobId, status: "running", pid: run.pid ?? null, runId: run.runId, runStatus: run.status };
  }

  /** POST /api/training/stop `{kill?, confirm?}` → once the process tree is gone, `{status: "stopped", ...}`. */
  async stop(body = {}) {
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new TrainingError(400, { error: "the body must be a JSON object" });
    }
    const params = { wait: true };
    const kill = optionalBoolean(body, "kill");
    const confirm = optionalBoolean(body, "confirm");
    if (kill !== undefined) {
      params.kill = kill;
    }
    if (confirm !== undefined) {
      params.confirm = confirm;
    }
    let run;
    try {
      run = await this.client.request("arena/stop", params);
    } catch (error) {
      throw httpError(error, "stop");
    }
    if (!run || run.status === "idle" || !run.runId) {
      return { status: "idle" };
    }
    this.runs.set(run.runId, run);
    return {
      status: run.status,
      id: run.jobId,
      runId: run.runId,
      exitCode: run.exitCode ?? null,
      stoppedBy: run.stoppedBy ?? null,
      lost: run.lost ?? null,
      step: run.step ?? null,
      lastCheckpoint: run.lastCheckpoint ?? null,
      tail: (run.tail ?? []).map((line) => pageLine(run.jobId, line).line),
    };
  }

  _learnRuns(runs) {
    for (const run of runs) {
      if (typeof run?.runId === "string") {
        this.runs.set(run.runId, run);
      }
    }
  }

  /**
   * Whether arena-ls knows the run: the runs seen so far, else one fresh
   * `arena/status` (shared by concurrent askers, at most one per
   * RUNS_REFRESH_MS, so a flood of made-up ids costs arena-ls one request).
   */
  async _knownRun(runId) {
    if (this.runs.has(runId)) {
      return this.runs.get(runId);
    }
    if (!this._runsLookup && performance.now() - this._runsLookedUpAt >= RUNS_REFRESH_MS) {
      this._runsLookedUpAt = performance.now();
      this._runsLookup = this.client
        .request("arena/status", { runsLimit: RUNS_LIMIT })
        .then((status) => this._learnRuns([...(status.runs ?? []), status.active].filter(Boolean)))
        .finally(() => {
          this._runsLookup = null;
        });
    }
    if (this._runsLookup) {
      try {
        await this._runsLookup;
      } catch (error) {
        throw httpError(error, "logs");
      }
    }
    return this.runs.get(runId);
  }

  /**
   * The run a log route means: `runId` if given (404 unless it has a run id's
   * shape and arena-ls knows the run: nothing is followed for it before), else
   * the active run, else the newest.
   */
  async _runFor(runId) {
    if (typeof runId === "string" && runId !== "") {
      if (runId.length > 200 || !RUN_ID_SHAPE.test(runId)) {
        throw new TrainingError(404, { error: "no such run: `runId` is not a run id", reason: "unknown-run" });
      }
      const run = await this._knownRun(runId);
      if (!run) {
        throw new TrainingError(404, { error: `no such run: ${runId}`, reason: "unknown-run" });
      }
      return { runId, jobId: run.jobId };
    }
    const status = await this._arenaStatus();
    const run = status.active ?? (status.runs ?? [])[(status.runs ?? []).length - 1] ?? null;
    if (run) {
      this.runs.set(run.runId, run);
    }
    return run ? { runId: run.runId, jobId: run.jobId } : null;
  }

  /** `logs({since, runId, limit})` → `{runId, lines, next, done}`: the JSON tail of 7.4. */
  async logs({ since = -1, runId, limit = JSON_PAGE_DEFAULT } = {}) {
    const run = await this._runFor(runId);
    if (!run) {
      return { runId: null, lines: [], next: since, done: true };
    }
    const follower = this.follower(run.runId);
    follower.subscribers += 1;
    try {
      const lines = await this._linesAfter(follower, since, Math.min(JSON_PAGE_MAX, Math.max(1, limit)));
      const next = lines.length > 0 ? lines[lines.length - 1].seq : since;
      return { runId: run.runId, lines: lines.map((line) => pageLine(run.jobId, line)), next, done: follower.finishedAfter(next) };
    } finally {
      follower.subscribers -= 1;
      this._release(run.runId);
    }
  }

  async _linesAfter(follower, since, limit) {
    try {
      return await follower.linesAfter(since, limit);
    } catch (error) {
      throw httpError(error, "logs");
    }
  }

  async _finalRun(runId) {
    try {
      const status = await this.client.request("arena/status", {});
      const run = [...(status.runs ?? []), status.active].find((candidate) => candidate?.runId === runId);
      if (run) {
        this.runs.set(runId, run);
      }
    } catch {
      // the cached RunInfo will do
    }
    return this.runs.get(runId) ?? null;
  }

  /** Closes every stream and stops arena-ls (runs go on in their agents). */
  async close() {
    for (const stream of this.streams) {
      stream.destroy();
    }
    this.followers.closeAll();
    await this.client.close();
  }
}
