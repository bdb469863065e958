/**
 * `RunInfo.keepAwake` (contract 8.3) in a few words, the same in every client.
 *
 * The server says `true` (the agent keeps the machine awake), `false` (told not
 * to, or not a `train` run of this machine) or `null`, whose reason is the run's
 * log line `the machine cannot be kept awake during this run: …`. The line comes
 * at the run's start: it is learned from the log as it arrives, or read once from
 * the first page of the run's log (`arena/logs`), and shown beside the live run.
 */
import { isLive } from "./protocol";
import type { LogLine, RunInfo } from "./protocol";
import { say } from "./wording";

/** The agent's log line when the platform does not allow keeping the machine awake. */
export const KEEP_AWAKE_LINE = "the machine cannot be kept awake during this run: ";
/** How many of the run's first log lines are read for that line (it comes as the agent starts, after what the trainer printed by then). */
export const REASON_LOG_LINES = 1000;
/** At most this many reads of a run's log for the line (a run whose agent has not decided yet). */
export const REASON_ASKS = 3;

/** The reason of the first `arena` line saying the machine cannot be kept awake, or undefined. */
export function keepAwakeReason(lines: readonly LogLine[]): string | undefined {
  for (const line of lines) {
    if (line?.stream === "arena" && typeof line.text === "string" && line.text.startsWith(KEEP_AWAKE_LINE)) {
      const reason = line.text.slice(KEEP_AWAKE_LINE.length).trim();
      return reason === "" ? undefined : reason;
    }
  }
  return undefined;
}

/**
 * A live run's keep-awake state in words; undefined once it ended, when the server does not say, and
 * for a null without its log's line: the agent, started after the trainer, may not have decided yet
 * (`keepAwake` is null until then), so nothing is claimed until the line says why.
 */
export function keepAwakeText(run: RunInfo, reason?: string): string | undefined {
  if (!isLive(run) || run.keepAwake === undefined) {
    return undefined;
  }
  if (run.keepAwake === true) {
    return say("keepingAwake");
  }
  if (run.keepAwake === false) {
    return say("notKeepingAwake");
  }
  return reason === undefined ? undefined : say("maySleep", { reason });
}

/** Each run's reason, learned from its log lines; each run's log is asked for at most once. */
export class KeepAwakeReasons {
  private readonly reasons = new Map<string, string>();
  private readonly asked = new Set<string>();
  private readonly asks = new Map<string, number>();

  /** Learns the reason from lines of the run's log; true when it was new. */
  see(runId: string, lines: readonly LogLine[]): boolean {
    if (this.reasons.has(runId)) {
      return false;
    }
    const reason = keepAwakeReason(lines);
    if (reason === undefined) {
      return false;
    }
    this.reasons.set(runId, reason);
    return true;
  }

  /**
   * The answer to the ask: the reason, if the lines have it. A log still shorter than the page may
   * not have the line yet (the agent decides just after the trainer starts, and `keepAwake` is null
   * until then): the run may be asked again; a full page without it is not read further.
   */
  answered(runId: string, lines: readonly LogLine[]): boolean {
    const learned = this.see(runId, lines);
    if (!learned && !this.reasons.has(runId) && lines.length < REASON_LOG_LINES) {
      this.asked.delete(runId);
    }
    return learned;
  }

  reasonOf(runId: string): string | undefined {
    return this.reasons.get(runId);
  }

  /** Whether the run's log is to be read for its reason now (live, `keepAwake` null, not known, not being asked, at most `REASON_ASKS` times). */
  shouldAsk(run: RunInfo | undefined): run is RunInfo {
    if (!run || !isLive(run) || run.keepAwake !== null || this.reasons.has(run.runId) || this.asked.has(run.runId)) {
      return false;
    }
    const asks = this.asks.get(run.runId) ?? 0;
    if (asks >= REASON_ASKS) {
      return false;
    }
    this.asks.set(run.runId, asks + 1);
    this.asked.add(run.runId);
    return true;
  }
}
