/**
 * The language client as this extension needs it:
 *
 * - `$/progress` of runs goes to the run item in the status bar (kept current
 *   by each report) instead of a second, uncancellable status-bar entry of
 *   the library's own; a run is stopped with `■ Stop`.
 * - The `Arena` channel gets the server's stderr and the library's lines at
 *   their own level, without a second timestamp; the last stderr lines are
 *   kept to say why a server died on start.
 * - While the server is starting, the library's own error toasts are kept
 *   back: the extension shows one message that names the cause.
 */
import * as vscode from "vscode";
import { LanguageClient, WorkDoneProgress, WorkDoneProgressCreateRequest } from "vscode-languageclient/node";
import type {
  ClientCapabilities,
  DynamicFeature,
  FeatureState,
  LanguageClientOptions,
  ProgressToken,
  ServerOptions,
  StaticFeature,
  WorkDoneProgressBegin,
  WorkDoneProgressEnd,
  WorkDoneProgressReport,
} from "vscode-languageclient/node";
import { ServerLogRouter } from "./core/serverLog";
import type { StderrTail } from "./core/serverLog";

export type ProgressValue = WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd;
export type ProgressSink = (token: ProgressToken, value: ProgressValue) => void;

/**
 * The `outputChannel` handed to the language client. `append` carries the
 * server's stderr (in chunks); `appendLine` the library's own lines. Both
 * go through `ServerLogRouter` (tested without the editor).
 */
export class LeveledChannel implements vscode.OutputChannel {
  readonly name: string;
  private readonly router: ServerLogRouter;

  constructor(private readonly log: vscode.LogOutputChannel) {
    this.name = log.name;
    this.router = new ServerLogRouter({
      trace: (text) => log.trace(text),
      debug: (text) => log.debug(text),
      info: (text) => log.info(text),
      warn: (text) => log.warn(text),
      error: (text) => log.error(text),
    });
  }

  get stderrTail(): StderrTail {
    return this.router.tail;
  }

  append(value: string): void {
    this.router.stderr(value);
  }

  appendLine(value: string): void {
    this.router.clientLines(value);
  }

  /** Writes a partial last stderr line (a server that died mid-line). */
  flushStderr(): void {
    this.router.flushStderr();
  }

  replace(value: string): void {
    this.log.replace(value);
  }

  clear(): void {
    this.log.clear();
  }

  show(columnOrPreserve?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
    if (typeof columnOrPreserve === "boolean") {
      this.log.show(columnOrPreserve);
    } else {
      this.log.show(preserveFocus);
    }
  }

  hide(): void {
    this.log.hide();
  }

  dispose(): void {
    // The channel belongs to the extension, not to one client.
  }
}

/** The LSP trace, at info level so that `arena.trace.server` shows it without changing the channel's level. */
export class TraceChannel extends LeveledChannel {
  constructor(private readonly traceLog: vscode.LogOutputChannel) {
    super(traceLog);
  }

  override append(value: string): void {
    this.traceLog.info(value.replace(/^\[(?:LSP|Trace)\s*- [^\]]*\] ?/, "").trimEnd());
  }

  override appendLine(value: string): void {
    this.append(value);
  }
}

/** Takes over `window/workDoneProgress/create`: each run's progress goes to the sink. */
class RunProgressFeature implements StaticFeature {
  private readonly subscriptions = new Map<ProgressToken, vscode.Disposable>();

  constructor(
    private readonly client: LanguageClient,
    private readonly sink: ProgressSink,
  ) {}

  getState(): FeatureState {
    return { kind: "static" };
  }

  fillClientCapabilities(capabilities: ClientCapabilities): void {
    capabilities.window = { ...(capabilities.window ?? {}), workDoneProgress: true };
  }

  initialize(): void {
    this.client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
      const subscription = this.client.onProgress(WorkDoneProgress.type, token, (value: ProgressValue) => {
        this.sink(token, value);
        if (value.kind === "end") {
          this.subscriptions.get(token)?.dispose();
          this.subscriptions.delete(token);
        }
      });
      this.subscriptions.set(token, subscription);
    });
  }

  clear(): void {
    for (const subscription of this.subscriptions.values()) {
      subscription.dispose();
    }
    this.subscriptions.clear();
  }
}

function isLibraryProgressFeature(feature: StaticFeature | DynamicFeature<unknown>): boolean {
  const state = feature.getState();
  return state.kind === "window" && state.id === WorkDoneProgressCreateRequest.method;
}

export class ArenaClient extends LanguageClient {
  /** True while `startReportingFailureItself` waits for the server. */
  private starting = false;
  private exitSeen: (() => void) | undefined;
  private readonly exited = new Promise<void>((resolve) => (this.exitSeen = resolve));

  constructor(
    serverOptions: ServerOptions,
    clientOptions: LanguageClientOptions,
    readonly channel: LeveledChannel,
    progress: ProgressSink,
  ) {
    super("arena", "Arena", serverOptions, clientOptions);
    this.registerFeature(new RunProgressFeature(this, progress));
  }

  /** Leaves out the library's progress feature, which would draw each run a second time. */
  override registerFeature(feature: StaticFeature | DynamicFeature<unknown>): void {
    if (!isLibraryProgressFeature(feature)) {
      super.registerFeature(feature);
    }
  }

  isStarting(): boolean {
    return this.starting;
  }

  /**
   * Starts the server with the library's error toasts held back: the caller
   * reports a failure itself, once. (Restarts the library makes after a
   * crash use `start()` and keep its usual messages.)
   */
  async startReportingFailureItself(): Promise<void> {
    this.starting = true;
    this.channel.stderrTail.clear();
    try {
      await this.start();
    } finally {
      this.starting = false;
    }
  }

  override error(message: string, data?: unknown, showNotification?: boolean | "force"): void {
    if (/^Server process exited with (code|signal) /.test(message)) {
      this.exitSeen?.();
    }
    super.error(message, data, this.starting ? false : showNotification);
  }

  /**
   * Resolves once the server process has exited (or after `timeoutMs`), and
   * a moment later, so that the last of its stderr has been read.
   */
  async serverExited(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.exited, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
    await new Promise<void>((resolve) => setTimeout(resolve, 100));
  }
}
