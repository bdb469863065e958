/**
 * Routes `arena/log` lines to one output per job, in order and without
 * duplicates, whether they come live or from an `arena/logs` backfill.
 */
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
    return { jobId: this.jobs.get(runId), texts: fresh.map(formatLogLine) };
  }

  /** Forgets what was written for a run, before its whole log is written again. */
  reset(runId: string): void {
    this.lastSeq.delete(runId);
  }
}
