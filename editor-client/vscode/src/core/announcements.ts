/**
 * The trainer's `@arena {...}` lines (contract section 3): hidden in the job's
 * output channel unless the setting `arena.showRawLines` is on, since the
 * reference trainer prints a readable line beside each. A line that only looks
 * like one (not a JSON object naming its `event`) is shown: it may be the
 * trainer's mistake. The same rule as the terminal's `--raw`.
 */
import type { LogLine } from "./protocol";

const PREFIX = "@arena ";
const LONGEST = 64 * 1024;

export function isAnnouncement(line: Pick<LogLine, "stream" | "text">): boolean {
  if (line.stream !== "stdout" || typeof line.text !== "string" || !line.text.startsWith(PREFIX) || line.text.length > LONGEST) {
    return false;
  }
  try {
    const payload: unknown = JSON.parse(line.text.slice(PREFIX.length));
    return (
      payload !== null &&
      typeof payload === "object" &&
      !Array.isArray(payload) &&
      typeof (payload as Record<string, unknown>).event === "string"
    );
  } catch {
    return false;
  }
}
