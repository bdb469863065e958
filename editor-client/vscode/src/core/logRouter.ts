/**
 * Routes `arena/log` lines to one output per job, in order and without
 * duplicates, whether they come live or from an `arena/logs` backfill.
 */
import { isAnnouncement } from "./announcements";
import { formatLogLine } from "./format";
import type { LogLine, RunInfo } from "./protocol";

export interface RoutedLines {
  /** The job the lines belong to, or undefined while the run is unknown. */
  jobId: string | undefined;
  /** The formatted lines still to write, oldest first. */
  texts: string[];
}

export class LogRouter {
  private readonly jobs = new Map<string, string>();
  private readonly lastSeq = new Map<string, number>();

  /** `showRaw`: whether the trainer's `@arena` announcements are written too (setting `arena.showRawLines`). */
  constructor(private readonly showRaw: () => boolean = () => false) {}

  /** Learns which job a run belongs to (from `arena/statusChanged` or `arena/status`). */
  remember(run: Pick<RunInfo, "runId" | "jobId">): void {
    this.jobs.set(run.runId, run.jobId);
  }

  jobOf(runId: string): string | undefined {
    return this.jobs.get(runId);
  }

  /** The lines of a run not written yet, formatted; marks them written. */
  route(runId: string, lines: readonly LogLine[]): RoutedLines {
    const seen = this.lastSeq.get(runId) ?? -Infinity;
    const fresh = [...lines].filter((line) => line.seq > seen).sort((a, b) => a.seq - b.seq);
    if (fresh.length > 0) {
      this.lastSeq.set(runId, fresh[fresh.length - 1].seq);
    }
    const shown = this.showRaw() ? fresh : fresh.filter((line) => !isAnnouncement(line));
    return { jobId: this.jobs.get(runId), texts: shown.map(formatLogLine) };
  }

  /** Forgets what was written for a run, before its whole log is written again. */
  reset(runId: string): void {
    this.lastSeq.delete(runId);
  }
}
