/**
 * Settings resolution and argument building, free of the editor API so that
 * plain Node tests cover them.
 */

/** Reads one setting by its dotted key inside the `arena` section. */
export type SettingReader = (key: string) => unknown;

export interface ServerCommand {
  command: string;
  args: string[];
}

/**
 * The server's settings (contract section 5, insights and probe of 6.3), as
 * dotted keys of the `arena` section. Each one is declared in package.json;
 * tests/editor/test_vscode_settings_match.py checks both against the server's
 * own table (arena_ls/settings.py).
 */
export const SERVER_SETTING_KEYS = [
  "manifest",
  "stateDir",
  "python",
  "preflight.minFreeRamMb",
  "preflight.requirePluggedIn",
  "preflight.gpuContention",
  "preflight.minFreeDiskMb",
  "device.fp32Only",
  "logs.notifyHz",
  "logs.keepRunsMb",
  "logs.maxRunMb",
  "watchdog.stallSeconds",
  "insights.enabled",
  "insights.lossSpikeWindow",
  "insights.lossSpikeMads",
  "insights.lossSpikeMinJump",
  "insights.lossSpikeHoldSeconds",
  "insights.gradWindow",
  "insights.gradWarmupSteps",
  "insights.gradClipFraction",
  "insights.gradParamRatio",
  "insights.gpuBubbleUtilization",
  "insights.gpuBubbleWindowSeconds",
  "insights.gpuBubbleFraction",
  "insights.gpuBubbleWarmupSeconds",
  "insights.checkpointOverdueFactor",
  "insights.thermalMaxCelsius",
  "probe.allowWithoutGpu",
  "probe.sampleSeconds",
  "power.onBattery",
  "power.graceSeconds",
  "power.resumeOnAc",
  "gates.severity",
  "clusters",
] as const;

/**
 * Keys whose null is meaningful to the server (null means "decide for me":
 * the GPU's compute capability, the GPU's own slowdown temperature), so a
 * null is sent rather than left out.
 */
const NULL_IS_A_VALUE: ReadonlySet<string> = new Set(["device.fp32Only", "insights.thermalMaxCelsius"]);

export const DEFAULT_MANIFEST = "training/manifest.json";

/**
 * Turns a setting that may be a string or a list of strings into an argument
 * list; anything else (or an empty value) gives an empty list.
 */
export function asArgv(value: unknown): string[] {
  if (typeof value === "string") {
    const trimmed = value.trim();
    return trimmed ? [trimmed] : [];
  }
  if (Array.isArray(value) && value.every((part) => typeof part === "string")) {
    const parts = value.map((part) => part.trim());
    return parts.length > 0 && parts[0] !== "" ? parts.filter((part) => part !== "") : [];
  }
  return [];
}

export interface InterpreterSources {
  /** The `arena.interpreter` setting, as read. */
  setting: unknown;
  /** The Python extension's active environment, when it is installed and has one. */
  pythonExtension?: string | undefined;
  /** `process.platform`. */
  platform: string;
}

/**
 * The interpreter that runs the server: the setting, else the Python
 * extension's active environment, else `python3` (plain `py` on Windows: the
 * launcher runs the active virtual environment's Python when `VIRTUAL_ENV` is
 * set, which `py -3` would not).
 */
export function resolveInterpreter(sources: InterpreterSources): string[] {
  const fromSetting = asArgv(sources.setting);
  if (fromSetting.length > 0) {
    return fromSetting;
  }
  const fromExtension = asArgv(sources.pythonExtension);
  if (fromExtension.length > 0) {
    return fromExtension;
  }
  return sources.platform === "win32" ? ["py"] : ["python3"];
}

/** `<interpreter...> -m arena_ls <serverArgs...>`, split for a process spawn. */
export function buildServerCommand(interpreter: string[], serverArgs: unknown): ServerCommand {
  if (interpreter.length === 0) {
    throw new Error("no interpreter to run arena_ls with");
  }
  const [command, ...interpreterArgs] = interpreter;
  return { command, args: [...interpreterArgs, "-m", "arena_ls", ...asArgv(serverArgs)] };
}

/** Reads dotted keys from a plain object, nested (`{preflight: {x: 1}}`) or flat (`{"preflight.x": 1}`). */
export function objectReader(section: unknown): SettingReader {
  return (key: string): unknown => {
    if (section === null || typeof section !== "object") {
      return undefined;
    }
    const record = section as Record<string, unknown>;
    if (key in record) {
      return record[key];
    }
    let node: unknown = section;
    for (const part of key.split(".")) {
      if (node === null || typeof node !== "object" || !(part in node)) {
        return undefined;
      }
      node = (node as Record<string, unknown>)[part];
    }
    return node;
  };
}

function isEmptyObject(value: unknown): boolean {
  return value !== null && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length === 0;
}

function setNested(target: Record<string, unknown>, key: string, value: unknown): void {
  const parts = key.split(".");
  let node = target;
  for (const part of parts.slice(0, -1)) {
    const child = node[part];
    if (child === null || typeof child !== "object") {
      node[part] = {};
    }
    node = node[part] as Record<string, unknown>;
  }
  node[parts[parts.length - 1]] = value;
}

/**
 * The server's settings as the nested object it reads from
 * `initializationOptions` and `workspace/configuration`. Client-only keys
 * are left out, and so are unset values (the server then uses its defaults);
 * an empty `python` means "the server's own interpreter" and is left out too,
 * and so is an empty object (`clusters` is `{}` until a user names one).
 */
export function serverSettings(read: SettingReader): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  for (const key of SERVER_SETTING_KEYS) {
    const value = read(key);
    if (value === undefined || (value === null && !NULL_IS_A_VALUE.has(key))) {
      continue;
    }
    if (key === "python") {
      const argv = asArgv(value);
      if (argv.length > 0) {
        settings.python = typeof value === "string" ? argv[0] : argv;
      }
      continue;
    }
    if (typeof value === "string" && value.trim() === "") {
      continue;
    }
    if (isEmptyObject(value)) {
      continue;
    }
    setNested(settings, key, value);
  }
  return settings;
}

/**
 * True when a configuration change needs a new server: a different
 * interpreter or arguments, or any server setting (the server reads them at
 * initialize). Tracing is applied live by the client library. `affects` is
 * `ConfigurationChangeEvent.affectsConfiguration` bound to the section.
 */
export function needsRestart(affects: (key: string) => boolean): boolean {
  return ["interpreter", "serverArgs", ...SERVER_SETTING_KEYS].some((key) => affects(`arena.${key}`));
}

/** The glob that selects the manifest for the language client. */
export function manifestPattern(manifestSetting: unknown): string {
  const manifest = typeof manifestSetting === "string" && manifestSetting.trim() ? manifestSetting.trim() : DEFAULT_MANIFEST;
  const normalised = manifest.replace(/\\/g, "/");
  if (/^([a-zA-Z]:)?\//.test(normalised)) {
    return normalised;
  }
  return `**/${normalised.replace(/^\.\//, "")}`;
}
