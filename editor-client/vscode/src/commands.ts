/**
 * The commands, the server's notifications, and the refusal dialogs.
 * Decisions (what to ask, what to retry, what to show) come from `core/`.
 */
import * as vscode from "vscode";
import type { LanguageClient, ProgressToken } from "vscode-languageclient/node";
import type { ProgressValue } from "./client";
import { addToManifestArgs, canAddToManifest } from "./core/adoption";
import { blockedDialog, statusReport } from "./core/format";
import { KeepAwakeReasons, REASON_LOG_LINES } from "./core/keepAwake";
import { LogRouter } from "./core/logRouter";
import { lostLine, stoppedNotice } from "./core/workLost";
import { probeCandidates, probedJobOf, verdictMessage, waitForVerdict } from "./core/probe";
import { Methods, isLive } from "./core/protocol";
import type { JobInfo, LogLine, LogNotification, LogsResult, ProbeVerdict, RunInfo, StartParams, StatusResult } from "./core/protocol";
import { asRpcError, decide } from "./core/refusals";
import type { Operation } from "./core/refusals";
import { newRebootOffers } from "./core/laptop";
import { resumeOffer, startParamsFor } from "./core/resume";
import { applyProgressMessage, runIdOfToken, runToShow } from "./core/runProgress";
import { JobChannels, StatusBar, StatusDocument, pickJob } from "./ui";

/** At most this many `arena/logs` pages are read for one `Show Logs`. */
const MAX_LOG_PAGES = 200;
/** After a probe run ends, `arena/status` is read this often (ms), this many times, for its verdict. */
const VERDICT_POLL_MS = 250;
const VERDICT_POLLS = 40;

/** A probe run being followed until its verdict is shown. */
interface PendingProbe {
  jobId: string;
  /** `JobInfo.probe` before the probe started: the verdict shown must differ from it. */
  before: ProbeVerdict | null;
}

export class Commands implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private readonly router = new LogRouter(() =>
    vscode.workspace.getConfiguration("arena").get<boolean>("showRawLines", false),
  );
  private readonly channels = new JobChannels();
  private readonly statusBar = new StatusBar();
  private readonly statusDocument = new StatusDocument();
  private readonly clientSubscriptions: vscode.Disposable[] = [];
  private shownRun: RunInfo | undefined;
  private logQueue: Promise<void> = Promise.resolve();
  private documentRefresh: "idle" | "busy" | "again" = "idle";
  /** `JobInfo.probe` of each job, from the latest `arena/status`. */
  private readonly probes = new Map<string, ProbeVerdict | null>();
  /** The runs whose resume after a restart of the machine was offered in this session (once each). */
  private readonly rebootOffersShown = new Set<string>();
  /** Probe runs (by run id) whose verdict is still to be shown. */
  private readonly pendingProbes = new Map<string, PendingProbe>();
  /** Probe runs seen ended (a probe start's answer may come after a short probe's end). */
  private readonly endedProbes = new Set<string>();
  /** Why a run cannot keep the machine awake (contract 8.3), from its log. */
  private readonly awakeReasons = new KeepAwakeReasons();

  constructor(private readonly log: vscode.LogOutputChannel) {}

  register(context: vscode.ExtensionContext): void {
    context.subscriptions.push(
      vscode.commands.registerCommand("arena.runJob", (jobId?: unknown) => this.runJob(jobId)),
      vscode.commands.registerCommand("arena.stopJob", () => this.stopJob()),
      vscode.commands.registerCommand("arena.probeJob", (jobId?: unknown) => this.probeJob(jobId)),
      vscode.commands.registerCommand("arena.showStatus", () => this.showStatus()),
      vscode.commands.registerCommand("arena.showLogs", () => this.showLogs()),
      vscode.commands.registerCommand("arena.addToManifest", () => this.addToManifest()),
      vscode.workspace.registerTextDocumentContentProvider(StatusDocument.scheme, this.statusDocument),
    );
  }

  /** The server's source action "Add this trainer to the manifest" on the active Python file. */
  private async addToManifest(): Promise<void> {
    const document = vscode.window.activeTextEditor?.document;
    if (!canAddToManifest(document?.languageId, document?.uri.scheme)) {
      void vscode.window.showInformationMessage("Arena: open the trainer (a Python file) to add it to the manifest.");
      return;
    }
    await vscode.commands.executeCommand("editor.action.sourceAction", addToManifestArgs());
  }

  /** Listens to a new client's notifications (handlers may be added before it starts). */
  attach(client: LanguageClient): void {
    this.client = client;
    this.clientSubscriptions.push(
      client.onNotification(Methods.statusChanged, (run: RunInfo) => this.onRun(run)),
      client.onNotification(Methods.log, (params: LogNotification) => {
        void this.enqueue(() => this.writeLive(params));
      }),
    );
  }

  detach(): void {
    this.client = undefined;
    for (const subscription of this.clientSubscriptions.splice(0)) {
      subscription.dispose();
    }
    // The last run stays in view while the server restarts; Run and Stop need a server.
    this.statusBar.hideActions();
  }

  /** Reads `arena/status`, learns its runs and shows the active one, else the latest. */
  async refresh(): Promise<StatusResult | undefined> {
    const status = await this.request<StatusResult>(Methods.status, {});
    for (const run of status.runs ?? []) {
      this.router.remember(run);
    }
    if (status.active) {
      this.router.remember(status.active);
    }
    for (const job of status.jobs ?? []) {
      this.probes.set(job.id, job.probe ?? null);
    }
    if (status.active) {
      this.awakeReasons.see(status.active.runId, status.logs ?? []);
    }
    this.shownRun = runToShow(status);
    this.showRun(this.shownRun);
    this.offerRebootResumes(status.runs ?? []);
    return status;
  }

  /** Contract 8.3: a run a restart of the machine interrupted is offered for resume, once a session. */
  private offerRebootResumes(runs: readonly RunInfo[]): void {
    for (const offer of newRebootOffers(runs, this.rebootOffersShown)) {
      void vscode.window.showWarningMessage(offer.message, offer.label).then(async (answer) => {
        if (answer === offer.label) {
          await this.guard(() => this.perform({ kind: "start", params: offer.params }));
        }
      });
    }
  }

  /** A `$/progress` value of a run: the run item takes the report's step, loss and ETA at once. */
  onProgress(token: ProgressToken, value: ProgressValue): void {
    const runId = runIdOfToken(token) ?? this.shownRun?.runId;
    if (value.kind === "end" || !isLive(this.shownRun) || this.shownRun.runId !== runId) {
      return;
    }
    this.shownRun = applyProgressMessage(this.shownRun, value.message);
    this.showRun(this.shownRun);
  }

  private async request<T>(method: string, params: object): Promise<T> {
    if (!this.client?.isRunning()) {
      throw new Error("the arena-ls server is not running");
    }
    return this.client.sendRequest<T>(method, params);
  }

  private onRun(run: RunInfo): void {
    const runId = run.runId;
    if (probedJobOf(run.jobId) !== undefined) {
      if (isLive(run) && this.endedProbes.has(runId)) {
        return; // an older report of a probe already seen ended
      }
      if (!isLive(run)) {
        this.endedProbes.add(runId);
      }
    }
    this.router.remember(run);
    if (!isLive(this.shownRun) || this.shownRun.runId === run.runId || isLive(run)) {
      this.shownRun = run;
      this.showRun(run);
    }
    this.followProbe(run);
    this.refreshOpenDocument();
  }

  private activeKeepAwakeReason(status: StatusResult): string | undefined {
    return status.active ? this.awakeReasons.reasonOf(status.active.runId) : undefined;
  }

  /** The run's item, with why it cannot keep the machine awake once its log has said (read once if need be). */
  private showRun(run: RunInfo | undefined): void {
    this.statusBar.show(run, run ? this.awakeReasons.reasonOf(run.runId) : undefined);
    if (this.awakeReasons.shouldAsk(run)) {
      void this.readKeepAwakeReason(run);
    }
  }

  /** Reads the first page of the run's log, where the agent says why the machine may sleep. */
  private async readKeepAwakeReason(run: RunInfo): Promise<void> {
    try {
      const result = await this.request<LogsResult>(Methods.logs, { runId: run.runId, limit: REASON_LOG_LINES });
      if (this.awakeReasons.answered(run.runId, result.lines ?? []) && this.shownRun?.runId === run.runId) {
        this.statusBar.show(this.shownRun, this.awakeReasons.reasonOf(run.runId));
        this.refreshOpenDocument();
      }
    } catch (error: unknown) {
      this.log.warn(`Reading why the machine may sleep: ${String(error)}`);
    }
  }

  /** Lines of a run's log: a reason learned shows at once in the run's item and the status document. */
  private learnKeepAwakeReason(runId: string, lines: readonly LogLine[]): void {
    if (this.awakeReasons.see(runId, lines) && this.shownRun?.runId === runId) {
      this.statusBar.show(this.shownRun, this.awakeReasons.reasonOf(runId));
      this.refreshOpenDocument();
    }
  }

  /** A followed probe run that ended: wait for its verdict and show it. */
  private followProbe(run: RunInfo): void {
    const runId = run.runId;
    const pending = this.pendingProbes.get(runId);
    if (pending === undefined || isLive(run)) {
      return;
    }
    this.pendingProbes.delete(runId);
    void this.guard(() => this.showVerdict(pending));
  }

  private async showVerdict(pending: PendingProbe): Promise<void> {
    const read = async (): Promise<ProbeVerdict | null | undefined> =>
      (await this.refresh())?.jobs?.find((job) => job.id === pending.jobId)?.probe;
    const verdict = await waitForVerdict(read, pending.before, { attempts: VERDICT_POLLS, delayMs: VERDICT_POLL_MS });
    if (verdict === undefined) {
      void vscode.window.showWarningMessage(`Arena: the probe of ${pending.jobId} ended without a verdict; see the Arena output.`);
      return;
    }
    const message = verdictMessage(pending.jobId, verdict);
    if (message.level === "info") {
      void vscode.window.showInformationMessage(message.text);
    } else {
      void vscode.window.showWarningMessage(message.text);
    }
  }

  /** Keeps an open status document current: one `arena/status` at a time, one more if runs changed meanwhile. */
  private refreshOpenDocument(): void {
    if (!this.statusDocument.isOpen()) {
      return;
    }
    if (this.documentRefresh !== "idle") {
      this.documentRefresh = "again";
      return;
    }
    this.documentRefresh = "busy";
    void this.request<StatusResult>(Methods.status, {})
      .then((status) => this.statusDocument.update(statusReport(status, this.activeKeepAwakeReason(status))))
      .catch((error: unknown) => this.log.warn(`Updating the status document: ${String(error)}`))
      .finally(() => {
        const again = this.documentRefresh === "again";
        this.documentRefresh = "idle";
        if (again) {
          this.refreshOpenDocument();
        }
      });
  }

  private async runJob(jobId?: unknown): Promise<void> {
    await this.guard(async () => {
      const status = await this.refresh();
      const jobs = status?.jobs ?? [];
      const job = typeof jobId === "string" ? (jobs.find((item) => item.id === jobId) ?? { id: jobId, runnable: true }) : await pickJob(jobs);
      if (job === undefined) {
        return;
      }
      if (!job.runnable) {
        await this.explainBlocked(job);
        return;
      }
      const params = await this.askResume(job, status?.runs ?? []);
      if (params) {
        await this.perform({ kind: "start", params });
      }
    });
  }

  /** `Arena: Probe Job`: a short run of a train job that measures its peak VRAM (`arena/start {id, probe: true}`). */
  private async probeJob(jobId?: unknown): Promise<void> {
    await this.guard(async () => {
      const status = await this.refresh();
      const jobs = status?.jobs ?? [];
      const candidates = probeCandidates(jobs);
      if (typeof jobId !== "string" && candidates.length === 0) {
        void vscode.window.showInformationMessage("Arena: the manifest lists no train job to probe.");
        return;
      }
      const job =
        typeof jobId === "string" ? (jobs.find((item) => item.id === jobId) ?? { id: jobId, runnable: true }) : await pickJob(candidates, "probe");
      if (job === undefined) {
        return;
      }
      if (!job.runnable) {
        await this.explainBlocked(job);
        return;
      }
      await this.perform({ kind: "start", params: { id: job.id, probe: true } });
    });
  }

  /** A job with a checkpoint: resume from it, or start fresh (a finished job would otherwise train nothing). */
  private async askResume(job: JobInfo, runs: readonly RunInfo[]): Promise<StartParams | undefined> {
    const offer = resumeOffer(job, runs);
    if (!offer) {
      return startParamsFor(job.id, undefined, undefined);
    }
    const answer = await vscode.window.showInformationMessage(offer.prompt, { modal: true }, ...offer.labels);
    return startParamsFor(job.id, offer, answer);
  }

  /** Every reason a picked job cannot run, whole, one a line; and the file of the first, one click away. */
  private async explainBlocked(job: JobInfo): Promise<void> {
    const dialog = blockedDialog(job);
    const located = (job.blockedBy ?? []).find((item) => typeof item.uri === "string" && item.uri !== "");
    const open = located ? "Open the File" : undefined;
    const answer = await vscode.window.showWarningMessage(dialog.message, { modal: true, detail: dialog.detail }, ...(open ? [open] : []));
    if (answer !== undefined && answer === open && located?.uri) {
      const start = located.range?.start;
      const selection = start ? new vscode.Range(start.line, start.character, start.line, start.character) : undefined;
      await vscode.window.showTextDocument(vscode.Uri.parse(located.uri), selection ? { selection } : {});
    }
  }

  private async stopJob(): Promise<void> {
    await this.guard(async () => {
      const run = isLive(this.shownRun) ? this.shownRun : ((await this.refresh())?.active ?? undefined);
      if (!run) {
        void vscode.window.showInformationMessage("Arena: nothing is running.");
        return;
      }
      await this.perform({ kind: "stop", params: { runId: run.runId }, jobLabel: run.jobId });
    });
  }

  /** Sends the operation; on a refusal, asks and retries or shows why (see `core/refusals`). */
  private async perform(operation: Operation): Promise<void> {
    let current: Operation | undefined = operation;
    while (current) {
      const attempt: Operation = current;
      current = undefined;
      const method = attempt.kind === "start" ? Methods.start : Methods.stop;
      const title = this.progressTitle(attempt);
      try {
        const result = await vscode.window.withProgress(
          { location: vscode.ProgressLocation.Notification, title },
          () => this.request<RunInfo | { status: "idle" }>(method, attempt.params),
        );
        if ("runId" in result) {
          if (attempt.kind === "stop" && lostLine(result) !== undefined) {
            void vscode.window.showInformationMessage(`Arena: ${stoppedNotice(result)}`);
          }
          if (attempt.kind === "start" && attempt.params.probe === true) {
            const pending = { jobId: attempt.params.id, before: this.probes.get(attempt.params.id) ?? null };
            if (this.endedProbes.has(result.runId)) {
              void this.guard(() => this.showVerdict(pending)); // it ended before this answer came
            } else {
              this.pendingProbes.set(result.runId, pending);
            }
          }
          this.onRun(result);
        } else {
          void vscode.window.showInformationMessage("Arena: nothing is running.");
        }
      } catch (thrown) {
        const error = asRpcError(thrown);
        if (!error) {
          throw thrown;
        }
        const decision = decide(attempt, error);
        if (decision.kind === "error") {
          void vscode.window.showErrorMessage(decision.message);
          return;
        }
        const answer = await vscode.window.showWarningMessage(decision.prompt, { modal: true }, decision.confirmLabel);
        current = answer === decision.confirmLabel ? decision.retry : undefined;
      }
    }
  }

  private progressTitle(operation: Operation): string {
    if (operation.kind === "stop") {
      return `Stopping ${operation.jobLabel ?? "the run"}…`;
    }
    return operation.params.probe === true ? `Starting the probe of ${operation.params.id}…` : `Starting ${operation.params.id}…`;
  }

  private async showStatus(): Promise<void> {
    await this.guard(async () => {
      const status = await this.refresh();
      if (status) {
        await this.statusDocument.show(statusReport(status, this.activeKeepAwakeReason(status)));
      }
    });
  }

  /** Writes the whole log of the active (else the latest) run to its job's channel, then follows it. */
  private async showLogs(): Promise<void> {
    await this.guard(async () => {
      const status = await this.refresh();
      const run = status?.active ?? status?.runs?.[status.runs.length - 1];
      if (!run) {
        void vscode.window.showInformationMessage("Arena: no run has logs yet.");
        return;
      }
      await this.enqueue(() => this.backfill(run));
      this.channels.get(run.jobId).show(true);
    });
  }

  private async backfill(run: RunInfo): Promise<void> {
    const channel = this.channels.get(run.jobId);
    channel.clear();
    this.router.reset(run.runId);
    let cursor: unknown;
    for (let page = 0; page < MAX_LOG_PAGES; page++) {
      const params = cursor === undefined ? { runId: run.runId } : { runId: run.runId, cursor };
      const result = await this.request<LogsResult>(Methods.logs, params);
      const lines = result.lines ?? [];
      this.learnKeepAwakeReason(run.runId, lines);
      this.router.route(run.runId, lines).texts.forEach((text) => channel.appendLine(text));
      if (lines.length === 0 || result.done === true) {
        return;
      }
      cursor = result.cursor;
    }
  }

  private async writeLive(params: LogNotification): Promise<void> {
    if (this.router.jobOf(params.runId) === undefined) {
      await this.refresh().catch(() => undefined);
    }
    this.learnKeepAwakeReason(params.runId, params.lines ?? []);
    const routed = this.router.route(params.runId, params.lines ?? []);
    const channel = this.channels.get(routed.jobId ?? `run ${params.runId}`);
    routed.texts.forEach((text) => channel.appendLine(text));
  }

  /** Log writes run one at a time, so that lines stay in order across awaits. */
  private enqueue(task: () => Promise<void>): Promise<void> {
    const next = this.logQueue.then(task);
    this.logQueue = next.catch((error: unknown) => this.log.warn(`Writing logs: ${String(error)}`));
    return next;
  }

  private async guard(task: () => Promise<void>): Promise<void> {
    try {
      await task();
    } catch (error) {
      this.log.error(String(error));
      void vscode.window.showErrorMessage(`Arena: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  dispose(): void {
    this.detach();
    this.statusBar.dispose();
    this.channels.dispose();
  }
}
