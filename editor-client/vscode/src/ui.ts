/**
 * The editor-facing pieces: status-bar items, the job picker, the status
 * document and the per-job log channels. The text they show comes from
 * `core/format`, which is tested without the editor.
 */
import * as vscode from "vscode";
import { RUN_ITEM_TEXT, STOP_ITEM_TEXT, jobPicks, logChannelName, runItemText, runTooltip } from "./core/format";
import type { JobPick } from "./core/format";
import { hasWarningInsight } from "./core/insights";
import { isLive } from "./core/protocol";
import type { JobInfo, RunInfo } from "./core/protocol";

export class StatusBar implements vscode.Disposable {
  private readonly run = vscode.window.createStatusBarItem("arena.run", vscode.StatusBarAlignment.Left, 10);
  private readonly stop = vscode.window.createStatusBarItem("arena.stop", vscode.StatusBarAlignment.Left, 9);
  private readonly state = vscode.window.createStatusBarItem("arena.state", vscode.StatusBarAlignment.Left, 8);

  constructor() {
    this.run.name = "Arena: Run Job";
    this.run.text = RUN_ITEM_TEXT;
    this.run.tooltip = "Run a training job";
    this.run.command = "arena.runJob";
    this.stop.name = "Arena: Stop Job";
    this.stop.text = STOP_ITEM_TEXT;
    this.stop.tooltip = "Stop the active run";
    this.stop.command = "arena.stopJob";
    this.state.name = "Arena: Run Status";
    this.state.command = "arena.showStatus";
  }

  /**
   * Shows `▶ Run` while nothing runs, `■ Stop` while a run is live, and the
   * last run's state with its insights (the leading one's icon and kind; all
   * of their messages in the tooltip).
   */
  show(run: RunInfo | undefined, keepAwakeReason?: string): void {
    if (isLive(run)) {
      this.run.hide();
      this.stop.show();
    } else {
      this.stop.hide();
      this.run.show();
    }
    if (run) {
      this.state.text = runItemText(run);
      this.state.tooltip = runTooltip(run, keepAwakeReason);
      this.state.backgroundColor = stateBackground(run);
      this.state.show();
    } else {
      this.state.hide();
    }
  }

  /** Hides Run and Stop (no server to send them to); the run's item stays. */
  hideActions(): void {
    this.run.hide();
    this.stop.hide();
  }

  dispose(): void {
    this.run.dispose();
    this.stop.dispose();
    this.state.dispose();
  }
}

/** Red for a run that failed or stalled, yellow while a warning insight holds. */
function stateBackground(run: RunInfo): vscode.ThemeColor | undefined {
  if (run.status === "crashed" || run.status === "lost" || run.stalled === true) {
    return new vscode.ThemeColor("statusBarItem.errorBackground");
  }
  return isLive(run) && hasWarningInsight(run) ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
}

interface JobItem extends vscode.QuickPickItem {
  pick?: JobPick;
}

/**
 * A picker of jobs (to run, or to probe). Blocked jobs are listed under
 * their own separator with a short summary of why; picking one answers it
 * (the caller shows every reason, whether or not a filter was typed).
 */
export function pickJob(jobs: readonly JobInfo[], purpose: "run" | "probe" = "run"): Promise<JobInfo | undefined> {
  const picks = jobPicks(jobs, purpose);
  const items: JobItem[] = [];
  for (const pick of picks) {
    if (!pick.runnable && !items.some((item) => item.kind === vscode.QuickPickItemKind.Separator)) {
      items.push({ label: "blocked", kind: vscode.QuickPickItemKind.Separator });
    }
    items.push({ label: pick.label, description: pick.description, detail: pick.detail, pick });
  }
  const quickPick = vscode.window.createQuickPick<JobItem>();
  quickPick.items = items;
  quickPick.placeholder = placeholder(picks, purpose);
  quickPick.matchOnDescription = true;
  quickPick.matchOnDetail = true;
  return new Promise((resolve) => {
    let chosen: JobInfo | undefined;
    quickPick.onDidAccept(() => {
      const pick = quickPick.selectedItems[0]?.pick;
      if (pick === undefined) {
        return;
      }
      chosen = jobs.find((job) => job.id === pick.jobId);
      quickPick.hide();
    });
    quickPick.onDidHide(() => {
      quickPick.dispose();
      resolve(chosen);
    });
    quickPick.show();
  });
}

function placeholder(picks: readonly JobPick[], purpose: "run" | "probe"): string {
  if (purpose === "probe") {
    if (picks.length === 0) {
      return "No train job to probe";
    }
    return picks.some((pick) => pick.runnable) ? "Probe the VRAM of which job?" : "No job can be probed now";
  }
  return picks.some((pick) => pick.runnable) ? "Run which job?" : "No job can run now";
}

/** A read-only document (`arena-status:`) holding the latest status report. */
export class StatusDocument implements vscode.TextDocumentContentProvider {
  static readonly scheme = "arena-status";
  static readonly uri = vscode.Uri.parse(`${StatusDocument.scheme}:Arena%20Status.txt`);
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;
  private text = "";

  provideTextDocumentContent(): string {
    return this.text;
  }

  async show(text: string): Promise<void> {
    this.update(text);
    const document = await vscode.workspace.openTextDocument(StatusDocument.uri);
    await vscode.window.showTextDocument(document, { preview: true, preserveFocus: false });
  }

  /** New text for the document; an open editor of it redraws. */
  update(text: string): void {
    if (text !== this.text) {
      this.text = text;
      this.changed.fire(StatusDocument.uri);
    }
  }

  isOpen(): boolean {
    const uri = StatusDocument.uri.toString();
    return vscode.workspace.textDocuments.some((document) => document.uri.toString() === uri && !document.isClosed);
  }
}

/** One output channel per job, created on first use. */
export class JobChannels implements vscode.Disposable {
  private readonly channels = new Map<string, vscode.OutputChannel>();

  get(jobId: string): vscode.OutputChannel {
    let channel = this.channels.get(jobId);
    if (!channel) {
      channel = vscode.window.createOutputChannel(logChannelName(jobId));
      this.channels.set(jobId, channel);
    }
    return channel;
  }

  dispose(): void {
    for (const channel of this.channels.values()) {
      channel.dispose();
    }
    this.channels.clear();
  }
}
