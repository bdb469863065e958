/**
 * `RunInfo.resumedFrom` (contract 8.2) in words: which checkpoint a resume took, how it was
 * verified, and each newer one it skipped with why. Free of the editor API.
 */

export interface SkippedCheckpoint {
  step: number;
  path: string;
  why: string;
}

export interface ResumedFrom {
  step: number;
  path: string;
  /** `sha256`, `bytes` or `exists`: the strongest check the checkpoint passed. */
  verified: string;
  skipped?: SkippedCheckpoint[] | null;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** `resumed from step 20 (ckpt-20.pt), verified by sha256`, or undefined when the run did not resume. */
export function resumedFromLine(resumed: unknown): string | undefined {
  if (!isRecord(resumed)) {
    return undefined;
  }
  return `resumed from step ${String(resumed.step)} (${String(resumed.path)}), verified by ${String(resumed.verified)}`;
}

/** One line per checkpoint the resume skipped: `skipped step 40 (ckpt-40.pt): is 3 bytes, ...`. */
export function skippedLines(resumed: unknown): string[] {
  if (!isRecord(resumed) || !Array.isArray(resumed.skipped)) {
    return [];
  }
  return resumed.skipped
    .filter(isRecord)
    .map((entry) => `skipped step ${String(entry.step)} (${String(entry.path)}): ${String(entry.why)}`);
}
