// AIDE's Training Room on arena-ls: a drop-in for the SOP's TrainingManager
// (daemon/training-manager.mjs) and the HTTP routes of contract section 7.4,
// served on the daemon's own http.Server.
//
//   import { attachTrainingArena } from "./training-arena.mjs";
//   attachTrainingArena(server, { workspace });          // the one line in server.mjs
//
// arena-ls runs as a child over stdio (LSP, vscode-languageserver-protocol);
// when it dies it is restarted with backoff, and the runs, which belong to
// their job agents, are re-adopted by the new server.
import http from "node:http";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ArenaClient, ServerUnavailable } from "./lib/arena-client.mjs";
import { LogFollower, stripAnsi } from "./lib/log-follower.mjs";
import { FollowersFull, MAX_FOLLOWERS, RunFollowers } from "./lib/run-followers.mjs";
import { TOKEN_HEADER, newToken, peerIsOwner, tokenMatches } from "./lib/trust.mjs";
import { Refusal, finishedPrompt, isAnnouncement, isLive, mismatchPrompt, oldCheckpointStopPrompt, rebootOffers, refusalDetail, stopPrompt } from "./lib/core.mjs";

export { MAX_FOLLOWERS, stripAnsi };

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const DEFAULT_ORIGIN = "http://127.0.0.1:4173";
const MAX_BODY_BYTES = 64 * 1024;
const KEEPALIVE_MS = 15_000;
const STATUS_LOG_LINES = 100;
const JSON_PAGE_DEFAULT = 1000;
const JSON_PAGE_MAX = 5000;
/** Unknown run ids look the runs up again at most this often (a flood of bogus ids costs one arena/status). */
const RUNS_REFRESH_MS = 2000;
const RUNS_LIMIT = 500;
/** A run id as arena-ls makes them (`<job id>-YYYYMMDDTHHMMSS-<hex>`, contract 2 and runlock.new_run_id). */
export const RUN_ID_SHAPE = /^[a-z0-9][a-z0-9._-]{0,63}-\d{8}T\d{6}-[0-9a-f]{4,32}$/;
const ROUTES = new Set(["/health", "/api/training/status", "/api/training/start", "/api/training/stop", "/api/training/logs"]);

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

/** `arena-ls` as an argument list: `ARENA_LS` (a JSON list or one path), the checkout's .venv, else PATH. */
export function defaultArenaCommand(env = process.env) {
  if (env.ARENA_LS) {
    return parseCommand(env.ARENA_LS);
  }
  const venv = path.resolve(HERE, "..", "..", ".venv");
  const checkout = process.platform === "win32" ? path.join(venv, "Scripts", "arena-ls.exe") : path.join(venv, "bin", "arena-ls");
  return existsSync(checkout) ? [checkout] : ["arena-ls"];
}

/** `--arena-ls CMD`: a JSON argument list (`["py","-3.10","-m","arena_ls"]`) or words split on spaces. No shell. */
export function parseCommand(text) {
  const trimmed = String(text).trim();
  if (trimmed.startsWith("[")) {
    const parsed = JSON.parse(trimmed);
    if (!Array.isArray(parsed) || parsed.length === 0 || !parsed.every((part) => typeof part === "string")) {
      throw new TypeError("--arena-ls must be a JSON list of strings");
    }
    return parsed;
  }
  const words = trimmed.split(/\s+/).filter(Boolean);
  if (words.length === 0) {
    throw new TypeError("--arena-ls is empty");
  }
  return words;
}

export function isLoopbackAddress(address) {
  if (typeof address !== "string") {
    return false;
  }
  const plain = address.startsWith("::ffff:") ? address.slice(7) : address;
  return plain === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(plain);
}

function isLoopbackHostName(host) {
  return host === "localhost" || host === "[::1]" || host === "::1" || isLoopbackAddress(host);
}

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

function jobShape(job, runs = []) {
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

function optionalBoolean(body, name) {
  const value = body[name];
  if (value !== undefined && typeof value !== "boolean") {
    throw new TrainingError(400, { error: `field \`${name}\` must be true or false` });
  }
  return value;
}

export class TrainingArena {
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

  // -- HTTP -------------------------------------------------------------------------------

  /**
   * Serves the routes of 7.4. Returns false (and touches nothing) for any
   * other path, so the daemon's own routes go on as before.
   */
  async handle(req, res) {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const pathname = url.pathname;
    if (!ROUTES.has(pathname) && !pathname.startsWith("/api/training/")) {
      return false;
    }
    if (pathname === "/health" && !this.serveHealth) {
      return false;
    }
    try {
      await this._route(req, res, url);
    } catch (error) {
      const failure = httpError(error, "request");
      this._json(req, res, failure.status, failure.body);
    }
    return true;
  }

  /**
   * The page's secret: the `X-Arena-Token` header, or for a GET the `token`
   * query parameter (an EventSource cannot send headers). Whatever the Origin.
   */
  _tokenShown(req, url) {
    const header = req.headers[TOKEN_HEADER];
    if (typeof header === "string" && header !== "") {
      return tokenMatches(header, this.token);
    }
    return req.method === "GET" && tokenMatches(url.searchParams.get("token") ?? "", this.token);
  }

  /** The origin check: a request with no Origin (curl, a same-origin navigation) or the page's own. */
  _originAllowed(req) {
    const origin = req.headers.origin;
    return origin === undefined || this.origins.has(origin);
  }

  /** Against DNS rebinding: the Host must name this loopback socket (127.0.0.1, localhost or [::1], our port). */
  _hostAllowed(req) {
    const host = String(req.headers.host ?? "").toLowerCase();
    const match = /^(\[[0-9a-f:.]+\]|[^:]+)(?::(\d+))?$/.exec(host);
    if (!match) {
      return false;
    }
    const port = match[2] === undefined ? 80 : Number(match[2]);
    return isLoopbackHostName(match[1]) && port === req.socket.localPort;
  }

  _corsHeaders(req) {
    const headers = { Vary: "Origin" };
    const origin = req.headers.origin;
    const allowed = origin !== undefined && this.origins.has(origin) ? origin : [...this.origins][0];
    if (allowed) {
      headers["Access-Control-Allow-Origin"] = allowed;
    }
    return headers;
  }

  _json(req, res, status, body) {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const text = JSON.stringify(body);
    res.writeHead(status, {
      ...this._corsHeaders(req),
      "Content-Type": "application/json; charset=utf-8",
      "Content-Length": Buffer.byteLength(text),
      "Cache-Control": "no-store",
      "X-Content-Type-Options": "nosniff",
    });
    res.end(text);
  }

  _refuse(req, res, status, error) {
    // No CORS header on a refusal of the origin: the foreign page learns nothing.
    const text = JSON.stringify({ error });
    res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text), Connection: "close" });
    res.end(text);
    req.resume();
  }

  async _route(req, res, url) {
    if (!isLoopbackAddress(req.socket.localAddress)) {
      this._refuse(req, res, 403, "the Training Room answers on loopback addresses only");
      return;
    }
    if (!this._hostAllowed(req)) {
      this._refuse(req, res, 403, "Host is not this daemon's loopback address");
      return;
    }
    if (this.checkPeer && (await peerIsOwner(req.socket)) === false) {
      this._refuse(req, res, 403, "another account's request: the Training Room answers its owner's account only");
      return;
    }
    if (!this._originAllowed(req)) {
      this._refuse(req, res, 403, "origin not allowed");
      return;
    }
    if (req.method === "OPTIONS") {
      res.writeHead(204, {
        ...this._corsHeaders(req),
        "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
        "Access-Control-Allow-Headers": "Content-Type, Last-Event-ID, X-Arena-Token",
        "Access-Control-Max-Age": "600",
      });
      res.end();
      return;
    }
    const route = `${req.method} ${url.pathname}`;
    if (route !== "GET /health" && !this._tokenShown(req, url)) {
      req.resume();
      throw new TrainingError(403, { error: "the Training Room page's token is missing or wrong: reload the page (or read the daemon's token file)", reason: "token-required" });
    }
    switch (route) {
      case "GET /health":
        await Promise.race([this.client.whenReady().catch(() => {}), new Promise((resolve) => setTimeout(resolve, 5000))]);
        this._json(req, res, 200, {
          ok: true,
          arena: {
            version: this.client.serverInfo?.version ?? null,
            workspace: this.workspace,
            ready: this.client.ready,
            pid: this.client.pid,
            restarts: this.client.restarts,
            lastExit: this.client.lastExit,
            followers: this.followerCount,
          },
        });
        return;
      case "GET /api/training/status":
        this._json(req, res, 200, await this.status());
        return;
      case "POST /api/training/start":
        this._json(req, res, 200, await this.start(await this._body(req)));
        return;
      case "POST /api/training/stop":
        this._json(req, res, 200, await this.stop(await this._body(req)));
        return;
      case "GET /api/training/logs":
        await this._logsRoute(req, res, url);
        return;
      default:
        if (ROUTES.has(url.pathname)) {
          throw new TrainingError(405, { error: `${req.method} is not allowed on ${url.pathname}` });
        }
        throw new TrainingError(404, { error: `no route ${url.pathname.slice(0, 100)}` });
    }
  }

  /** A POST body: application/json only (415 otherwise, no simple-request CSRF), at most 64 KiB (413). */
  async _body(req) {
    const type = String(req.headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
    if (type !== "application/json") {
      req.resume();
      throw new TrainingError(415, { error: "the body must be application/json" });
    }
    const declared = Number(req.headers["content-length"]);
    if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) {
      req.resume();
      throw new TrainingError(413, { error: `the body is larger than ${MAX_BODY_BYTES} bytes` });
    }
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        req.resume();
        throw new TrainingError(413, { error: `the body is larger than ${MAX_BODY_BYTES} bytes` });
      }
      chunks.push(chunk);
    }
    const text = Buffer.concat(chunks).toString("utf8").trim();
    if (text === "") {
      return {};
    }
    let parsed;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new TrainingError(400, { error: "the body is not valid JSON" });
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw new TrainingError(400, { error: "the body must be a JSON object" });
    }
    return parsed;
  }

  _since(req, url) {
    const header = req.headers["last-event-id"];
    const raw = header !== undefined && header !== "" ? header : url.searchParams.get("since");
    if (raw === null || raw === undefined || raw === "") {
      return -1;
    }
    if (!/^-?\d{1,15}$/.test(String(raw)) || Number(raw) < -1) {
      throw new TrainingError(400, { error: "`since` (or Last-Event-ID) must be a line's seq" });
    }
    return Number(raw);
  }

  async _logsRoute(req, res, url) {
    const since = this._since(req, url);
    const runId = url.searchParams.get("runId") ?? undefined;
    if (url.searchParams.get("format") === "json") {
      const limitText = url.searchParams.get("limit");
      const limit = limitText === null ? JSON_PAGE_DEFAULT : Number(limitText);
      if (!Number.isInteger(limit) || limit < 1) {
        throw new TrainingError(400, { error: "`limit` must be a whole number from 1" });
      }
      this._json(req, res, 200, await this.logs({ since, runId, limit }));
      return;
    }
    const run = await this._runFor(runId);
    if (!run) {
      res.writeHead(204, this._corsHeaders(req));
      res.end();
      return;
    }
    const follower = this.follower(run.runId);
    // The end of a run's log is only known once it is read: a reconnect after `event: end` gets 204.
    if (follower.done && follower.finishedAfter(since)) {
      res.writeHead(204, this._corsHeaders(req));
      res.end();
      this._release(run.runId);
      return;
    }
    await this._stream(req, res, follower, run, since);
  }

  async _stream(req, res, follower, run, since) {
    res.writeHead(200, {
      ...this._corsHeaders(req),
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-store",
      Connection: "keep-alive",
      "X-Accel-Buffering": "no",
    });
    res.socket?.setNoDelay(true);
    let open = true;
    this.streams.add(res);
    follower.subscribers += 1;
    const closed = new Promise((resolve) => res.once("close", resolve));
    closed.then(() => {
      open = false;
    });
    const write = async (text) => {
      if (open && !res.write(text)) {
        await Promise.race([new Promise((resolve) => res.once("drain", resolve)), closed]);
      }
    };
    const keepalive = setInterval(() => {
      if (open) {
        res.write(": keepalive\n\n");
      }
    }, this.keepaliveMs);
    try {
      await write(`retry: 1000\n: run ${run.runId}\n\n`);
      let last = since;
      while (open) {
        const lines = await this._linesAfter(follower, last, 500);
        if (lines.length > 0) {
          let chunk = "";
          for (const line of lines) {
            chunk += `event: line\nid: ${line.seq}\ndata: ${JSON.stringify({ line: pageLine(run.jobId, line).line, at: line.at, stream: line.stream })}\n\n`;
          }
          last = lines[lines.length - 1].seq;
          await write(chunk);
          continue;
        }
        if (follower.finishedAfter(last)) {
          const final = runShape(await this._finalRun(run.runId)) ?? { runId: run.runId, id: run.jobId };
          await write(`event: end\ndata: ${JSON.stringify(final)}\n\n`);
          break;
        }
        await Promise.race([follower.changed(this.keepaliveMs), closed]);
      }
    } catch (error) {
      this.logger.error?.(`log stream of ${run.runId}: ${error?.message ?? error}`);
    } finally {
      clearInterval(keepalive);
      follower.subscribers -= 1;
      this.streams.delete(res);
      res.end();
      this._release(run.runId);
    }
  }
}

/**
 * The one line for AIDE's server.mjs: `attachTrainingArena(server, { workspace })`.
 * Every `request` listener already on the server keeps running for the paths
 * this module does not serve.
 */
export function attachTrainingArena(server, options) {
  const arena = options instanceof TrainingArena ? options : new TrainingArena(options);
  const previous = server.listeners("request");
  server.removeAllListeners("request");
  server.on("request", (req, res) => {
    arena.handle(req, res).then(
      (handled) => {
        if (!handled) {
          for (const listener of previous) {
            listener.call(server, req, res);
          }
          if (previous.length === 0) {
            res.writeHead(404, { "Content-Type": "application/json" });
            res.end(JSON.stringify({ error: "not found" }));
          }
        }
      },
      (error) => {
        arena.logger.error?.(`training arena: ${error?.stack ?? error}`);
        if (!res.headersSent) {
          res.writeHead(500);
        }
        res.end();
      },
    );
  });
  server.on("listening", () => {
    const address = server.address();
    if (address && typeof address === "object" && !isLoopbackAddress(address.address)) {
      arena.logger.error?.(`training arena: the server listens on ${address.address}; the training routes answer on loopback only`);
    }
  });
  server.on("close", () => {
    arena.close().catch(() => {});
  });
  server.trainingArena = arena;
  return arena;
}

/** Listens on a loopback address only; anything else is refused before a socket is opened. */
export function listenLoopback(server, port, host = "127.0.0.1") {
  if (!isLoopbackHostName(host) || host === "localhost") {
    return Promise.reject(new Error(`refusing to listen on ${host}: the Training Room binds loopback addresses only (127.0.0.1 or ::1)`));
  }
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host.replace(/^\[|\]$/g, ""), () => {
      server.off("error", reject);
      resolve(server.address());
    });
  });
}

/** A daemon of its own: the training routes on 127.0.0.1:port. */
export async function serveTrainingArena(options, port = 4777, host = "127.0.0.1") {
  const server = http.createServer();
  const arena = attachTrainingArena(server, options);
  await listenLoopback(server, port, host);
  return { server, arena };
}
