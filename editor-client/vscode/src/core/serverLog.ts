/**
 * The `Arena` log channel: the server's stderr and the language client's own
 * lines, each at its level and without a second timestamp, and the last
 * stderr lines kept to say why a server died on start.
 *
 * The server logs `2026-11-30 12:00:00,123 INFO arena_ls.x: text` on stderr;
 * vscode-languageclient writes `[Error - 12:00:00 PM] text`. A
 * `LogOutputChannel` adds its own time and level, so both prefixes are
 * stripped and their level is used instead.
 */

export type Level = "trace" | "debug" | "info" | "warn" | "error";

export interface LogEntry {
  level: Level;
  text: string;
}

const SERVER_LEVELS: Readonly<Record<string, Level>> = {
  DEBUG: "debug",
  INFO: "info",
  WARNING: "warn",
  ERROR: "error",
  CRITICAL: "error",
};

const CLIENT_LEVELS: Readonly<Record<string, Level>> = {
  Trace: "trace",
  Debug: "debug",
  Info: "info",
  Warn: "warn",
  Error: "error",
};

const SERVER_LINE = /^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)? (DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)$/;
const CLIENT_LINE = /^\[(Trace|Debug|Info|Warn|Error)\s*- [^\]]*\] ?(.*)$/;

/** The server exiting with 0 is a shutdown it was asked for, not an error. */
const CLEAN_EXIT = /^Server process exited with code 0\.?$/;

/**
 * Classifies the server's stderr line by line. A line without the log
 * prefix (a traceback's body, Python's own `No module named ...`) keeps the
 * level of the line before it, or `warn` when none came before.
 */
export class StderrClassifier {
  private previous: Level = "warn";

  classify(line: string): LogEntry {
    const match = SERVER_LINE.exec(line);
    if (match) {
      this.previous = SERVER_LEVELS[match[1]];
      return { level: this.previous, text: match[2] };
    }
    return { level: this.previous, text: line };
  }
}

/** Classifies the language client's own lines (`appendLine`); a data line keeps its message's level. */
export class ClientLineClassifier {
  private previous: Level = "info";

  classify(line: string): LogEntry {
    const match = CLIENT_LINE.exec(line);
    if (!match) {
      return { level: this.previous, text: line };
    }
    const text = match[2];
    this.previous = CLEAN_EXIT.test(text) ? "info" : CLIENT_LEVELS[match[1]];
    return { level: this.previous, text };
  }
}

/** Splits chunks of a stream into whole lines, holding a partial last line until its end comes. */
export class LineSplitter {
  private partial = "";

  push(chunk: string): string[] {
    const text = this.partial + chunk;
    const lines = text.split(/\r?\n/);
    this.partial = lines.pop() ?? "";
    return lines.filter((line) => line.trim() !== "");
  }

  /** The partial line, if any, as a last line. */
  flush(): string[] {
    const rest = this.partial;
    this.partial = "";
    return rest.trim() === "" ? [] : [rest];
  }
}

/** The last lines of the server's stderr, for the message shown when it dies on start. */
export class StderrTail {
  private readonly lines: string[] = [];

  constructor(private readonly limit = 12) {}

  add(line: string): void {
    this.lines.push(line);
    if (this.lines.length > this.limit) {
      this.lines.shift();
    }
  }

  clear(): void {
    this.lines.length = 0;
  }

  all(): string[] {
    return [...this.lines];
  }
}

/** The one line of a dead server's stderr most likely to say why: the last error-like line, else the last line. */
export function causeLine(lines: readonly string[]): string | undefined {
  const meaningful = lines.map((line) => line.trim()).filter((line) => line !== "");
  const errorLike = meaningful.filter((line) =>
    /(Error|No module named|not found|cannot|can't|Permission denied|CRITICAL|ERROR)/.test(line),
  );
  const chosen = errorLike.length > 0 ? errorLike[errorLike.length - 1] : meaningful[meaningful.length - 1];
  if (chosen === undefined) {
    return undefined;
  }
  const server = SERVER_LINE.exec(chosen);
  return server ? server[2] : chosen;
}

/** The spawn error's words for an interpreter that is not there. */
function spawnCause(error: unknown, interpreter: readonly string[]): string | undefined {
  const text = error instanceof Error ? error.message : String(error);
  if (/ENOENT/.test(text)) {
    return `${interpreter[0] ?? "the interpreter"} was not found`;
  }
  return undefined;
}

/**
 * The one error message shown when the server did not start: the cause (the
 * last stderr line that says why, or a missing interpreter), the
 * interpreter it ran, and the setting to change.
 */
export function startFailureMessage(interpreter: readonly string[], stderr: readonly string[], error: unknown): string {
  const cause = spawnCause(error, interpreter) ?? causeLine(stderr) ?? (error instanceof Error ? error.message : String(error));
  return (
    `Arena: the arena-ls server did not start: ${cause} (interpreter: ${interpreter.join(" ")}). ` +
    "Install arena-ls into that Python, or set arena.interpreter to one that has it."
  );
}

/** Where classified lines go: a `LogOutputChannel` in the editor, a recorder in tests. */
export type LevelSink = Record<Level, (text: string) => void>;

/**
 * The `Arena` channel's input: the server's stderr in chunks (`stderr`),
 * the language client's own lines (`clientLines`). Each line goes to the
 * sink at its level; the last stderr lines are kept in `tail`.
 */
export class ServerLogRouter {
  readonly tail = new StderrTail();
  private readonly stderrLevels = new StderrClassifier();
  private readonly splitter = new LineSplitter();
  private readonly clientLevels = new ClientLineClassifier();

  constructor(private readonly sink: LevelSink) {}

  stderr(chunk: string): void {
    this.writeStderr(this.splitter.push(chunk));
  }

  /** Writes a partial last stderr line (a server that died mid-line). */
  flushStderr(): void {
    this.writeStderr(this.splitter.flush());
  }

  clientLines(text: string): void {
    for (const line of text.split(/\r?\n/)) {
      if (line.trim() !== "") {
        const entry = this.clientLevels.classify(line);
        this.sink[entry.level](entry.text);
      }
    }
  }

  private writeStderr(lines: string[]): void {
    for (const line of lines) {
      this.tail.add(line);
      const entry = this.stderrLevels.classify(line);
      this.sink[entry.level](entry.text);
    }
  }
}
