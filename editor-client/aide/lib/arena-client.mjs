// The LSP side of the AIDE client: one `arena-ls` child over stdio, spoken to
// with vscode-languageserver-protocol, restarted with backoff when it dies.
// Runs do not die with it: they belong to their job agents, and the next
// server re-adopts them, so a restart only costs the requests in flight.
import { spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { pathToFileURL } from "node:url";
import path from "node:path";
import {
  createProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
  InitializeRequest,
  InitializedNotification,
  ShutdownRequest,
  ExitNotification,
  ConfigurationRequest,
  WorkDoneProgressCreateRequest,
  RegistrationRequest,
  UnregistrationRequest,
  ShowMessageRequest,
} from "vscode-languageserver-protocol/node";

const FIRST_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 30_000;
/** A server that lived this long before dying starts the backoff again from its first step. */
const STABLE_MS = 60_000;
const STDERR_TAIL = 40;

/** The error thrown for a request while no server is there to answer it. */
export class ServerUnavailable extends Error {
  constructor(why) {
    super(`arena-ls is not running (${why}); it is being restarted`);
    this.name = "ServerUnavailable";
  }
}

/**
 * `command` is an argument list (`["/repo/.venv/bin/arena-ls"]`); no shell.
 * Events: `ready` (after each initialize), `down` ({code, signal, stderr}),
 * `log` (arena/log params), `statusChanged` (RunInfo).
 */
export class ArenaClient extends EventEmitter {
  constructor({ command, workspace, settings = {}, env = process.env, logger = console }) {
    super();
    if (!Array.isArray(command) || command.length === 0 || !command.every((part) => typeof part === "string")) {
      throw new TypeError("command must be a non-empty argument list");
    }
    this.command = command;
    this.workspace = path.resolve(workspace);
    this.settings = settings;
    this.env = env;
    this.logger = logger;
    this.connection = null;
    this.child = null;
    this.ready = false;
    this.closed = false;
    this.restarts = 0;
    this.backoffMs = FIRST_BACKOFF_MS;
    this.serverInfo = null;
    this.stderrTail = [];
    this.restartTimer = null;
    this.lastExit = null;
    this._readyWaiters = [];
    this._inflight = new Set();
  }

  /** Starts the server and resolves once it has answered `initialize`. */
  async start() {
    this._spawn();
    return this.whenReady();
  }

  /** Resolves when a server is initialised (at once if one is). */
  whenReady() {
    if (this.ready) {
      return Promise.resolve();
    }
    if (this.closed) {
      return Promise.reject(new ServerUnavailable("closed"));
    }
    return new Promise((resolve, reject) => this._readyWaiters.push({ resolve, reject }));
  }

  get pid() {
    return this.child?.pid ?? null;
  }

  _spawn() {
    const [file, ...args] = this.command;
    const child = spawn(file, args, { cwd: this.workspace, env: this.env, stdio: ["pipe", "pipe", "pipe"] });
    this.child = child;
    const bornAt = Date.now();
    child.stderr.setEncoding("utf8");
    let pending = "";
    child.stderr.on("data", (chunk) => {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) {
        this.stderrTail.push(line);
        if (this.stderrTail.length > STDERR_TAIL) {
          this.stderrTail.shift();
        }
      }
    });
    child.stdin.on("error", () => {}); // a dead server's pipe; the exit handler restarts it
    const connection = createProtocolConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
    this.connection = connection;
    connection.onRequest(ConfigurationRequest.type, (params) =>
      params.items.map((item) => (item.section === "arena" ? this.settings : null)),
    );
    connection.onRequest(WorkDoneProgressCreateRequest.type, () => null);
    connection.onRequest(RegistrationRequest.type, () => null);
    connection.onRequest(UnregistrationRequest.type, () => null);
    connection.onRequest(ShowMessageRequest.type, () => null);
    connection.onNotification("arena/log", (params) => this.emit("log", params));
    connection.onNotification("arena/statusChanged", (params) => this.emit("statusChanged", params));
    connection.onNotification("window/logMessage", (params) => this.logger.error?.(`arena-ls: ${params?.message ?? ""}`));
    connection.onNotification("window/showMessage", (params) => this.emit("showMessage", params));
    connection.onError(() => {});
    connection.listen();
    child.once("error", (error) => {
      this.stderrTail.push(`cannot start ${file}: ${error.message}`);
    });
    child.once("close", (code, signal) => this._onExit(child, connection, code, signal, bornAt));
    this._initialize(connection, child).catch((error) => {
      this.logger.error?.(`arena-ls initialize failed: ${error?.message ?? error}`);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
      }
    });
  }

  async _initialize(connection, child) {
    const uri = pathToFileURL(this.workspace).href;
    const result = await connection.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      clientInfo: { name: "aide-training-arena", version: "0.1.0" },
      rootUri: uri,
      rootPath: this.workspace,
      workspaceFolders: [{ uri, name: path.basename(this.workspace) || this.workspace }],
      capabilities: { workspace: { configuration: true }, window: { showMessage: {} }, general: { positionEncodings: ["utf-16"] } },
      initializationOptions: this.settings,
    });
    if (this.child !== child) {
      return;
    }
    await connection.sendNotification(InitializedNotification.type, {});
    this.serverInfo = result?.serverInfo ?? null;
    this.ready = true;
    for (const waiter of this._readyWaiters.splice(0)) {
      waiter.resolve();
    }
    this.emit("ready", { restarts: this.restarts, pid: child.pid });
  }

  _onExit(child, connection, code, signal, bornAt) {
    if (this.child !== child) {
      return;
    }
    this.ready = false;
    this.child = null;
    this.connection = null;
    connection.dispose();
    const stderr = [...this.stderrTail];
    this.lastExit = { code, signal, at: new Date().toISOString(), stderr: stderr.slice(-5) };
    for (const reject of this._inflight) {
      reject();
    }
    this.emit("down", { code, signal, stderr });
    if (this.closed) {
      return;
    }
    if (Date.now() - bornAt >= STABLE_MS) {
      this.backoffMs = FIRST_BACKOFF_MS;
    }
    const wait = this.backoffMs;
    this.backoffMs = Math.min(MAX_BACKOFF_MS, this.backoffMs * 2);
    this.logger.error?.(`arena-ls exited (code ${code}, signal ${signal}); restarting in ${wait} ms. ${stderr.slice(-3).join(" | ")}`);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (!this.closed) {
        this.restarts += 1;
        this._spawn();
      }
    }, wait);
  }

  /** One request; fails with ServerUnavailable while the server is down (never waits for a restart). */
  async request(method, params) {
    if (!this.ready || this.connection === null) {
      throw new ServerUnavailable(this.closed ? "closed" : "starting");
    }
    const connection = this.connection;
    let rejectOnExit;
    const exited = new Promise((_, reject) => {
      rejectOnExit = () => reject(new ServerUnavailable("it exited during the request"));
    });
    this._inflight.add(rejectOnExit);
    try {
      return await Promise.race([connection.sendRequest(method, params), exited]);
    } finally {
      this._inflight.delete(rejectOnExit);
    }
  }

  /** `shutdown` then `exit`; a server that does not go is killed. Runs go on. */
  async close() {
    this.closed = true;
    clearTimeout(this.restartTimer);
    for (const waiter of this._readyWaiters.splice(0)) {
      waiter.reject(new ServerUnavailable("closed"));
    }
    const child = this.child;
    const connection = this.connection;
    if (!child) {
      return;
    }
    const gone = new Promise((resolve) => child.once("close", resolve));
    if (connection && this.ready) {
      try {
        await Promise.race([connection.sendRequest(ShutdownRequest.type), delay(5000)]);
        await connection.sendNotification(ExitNotification.type);
      } catch {
        // the server is already going
      }
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await gone;
    clearTimeout(timer);
  }
}

function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
