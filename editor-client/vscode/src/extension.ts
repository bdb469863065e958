/**
 * The thin VS Code client of arena-ls: find an interpreter, run
 * `python -m arena_ls` on stdio, restart it when settings change, and wire
 * the commands, status bar and log channels. Everything that can be decided
 * without the editor lives in `core/`.
 */
import * as vscode from "vscode";
import { CloseAction, ErrorAction, TransportKind } from "vscode-languageclient/node";
import type { ErrorHandler, LanguageClientOptions, ServerOptions } from "vscode-languageclient/node";
import { ArenaClient, LeveledChannel, TraceChannel } from "./client";
import { Commands } from "./commands";
import { startFailureMessage } from "./core/serverLog";
import { asArgv, buildServerCommand, manifestPattern, needsRestart, objectReader, resolveInterpreter, serverSettings } from "./core/settings";

const PYTHON_EXTENSION_ID = "ms-python.python";

/** The part of the Python extension's API this client reads. */
interface PythonExtensionApi {
  environments: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { path: string };
    resolveEnvironment(environment: { path: string }): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
  };
}

let client: ArenaClient | undefined;
let log: vscode.LogOutputChannel;
let channel: LeveledChannel;
let traceChannel: TraceChannel;
let commands: Commands;
let lifecycle: Promise<void> = Promise.resolve();

function workspaceResource(): vscode.Uri | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri;
}

async function pythonExtensionApi(): Promise<PythonExtensionApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID);
  if (!extension) {
    return undefined;
  }
  try {
    return extension.isActive ? extension.exports : await extension.activate();
  } catch (error) {
    log.warn(`The Python extension did not activate: ${String(error)}`);
    return undefined;
  }
}

async function pythonExtensionInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
  const api = await pythonExtensionApi();
  if (!api?.environments) {
    return undefined;
  }
  const environment = await api.environments.resolveEnvironment(api.environments.getActiveEnvironmentPath(resource));
  return environment?.executable.uri?.fsPath;
}

/**
 * The interpreter: the `arena.interpreter` setting, else the Python
 * extension's active environment, else `python3` (plain `py` on Windows).
 */
async function interpreterFor(config: vscode.WorkspaceConfiguration): Promise<string[]> {
  const setting = config.get<unknown>("interpreter");
  const fromExtension = hasValue(setting) ? undefined : await pythonExtensionInterpreter(workspaceResource());
  return resolveInterpreter({ setting, pythonExtension: fromExtension, platform: process.platform });
}

function serverOptions(interpreter: string[], config: vscode.WorkspaceConfiguration): ServerOptions {
  const { command, args } = buildServerCommand(interpreter, config.get<unknown>("serverArgs"));
  log.info(`Starting the server: ${[command, ...args].join(" ")}`);
  return { command, args, transport: TransportKind.stdio, options: { cwd: workspaceResource()?.fsPath } };
}

/**
 * A server that dies while starting is reported once, by `startClient`;
 * once it runs, a crash gets the library's usual handling (a few restarts).
 */
function errorHandler(): ErrorHandler {
  let fallback: ErrorHandler | undefined;
  const usual = (): ErrorHandler => (fallback ??= client?.createDefaultErrorHandler() ?? {
    error: () => ({ action: ErrorAction.Shutdown }),
    closed: () => ({ action: CloseAction.DoNotRestart }),
  });
  return {
    error: (error, message, count) =>
      client?.isStarting() ? { action: ErrorAction.Shutdown, handled: true } : usual().error(error, message, count),
    closed: () => (client?.isStarting() ? { action: CloseAction.DoNotRestart, handled: true } : usual().closed()),
  };
}

function hasValue(setting: unknown): boolean {
  return asArgv(setting).length > 0;
}

function clientOptions(config: vscode.WorkspaceConfiguration): LanguageClientOptions {
  return {
    documentSelector: [
      { scheme: "file", language: "python" },
      { scheme: "file", pattern: manifestPattern(config.get<unknown>("manifest")) },
    ],
    outputChannel: channel,
    traceOutputChannel: traceChannel,
    initializationOptions: serverSettings((key) => config.get<unknown>(key)),
    errorHandler: errorHandler(),
    // A failed initialize is reported once, by startClient.
    initializationFailedHandler: () => false,
    middleware: {
      workspace: {
        // The server asks for section `arena`; answer with its settings only, shaped as it reads them.
        configuration: async (params, token, next) => {
          const answer = await next(params, token);
          if (!Array.isArray(answer)) {
            return answer;
          }
          return answer.map((item: unknown, index) =>
            params.items[index]?.section === "arena" ? serverSettings(objectReader(item)) : item,
          );
        },
      },
    },
  };
}

async function startClient(): Promise<void> {
  const config = vscode.workspace.getConfiguration("arena", workspaceResource());
  const interpreter = await interpreterFor(config);
  const next = new ArenaClient(serverOptions(interpreter, config), clientOptions(config), channel, (token, value) =>
    commands.onProgress(token, value),
  );
  commands.attach(next);
  client = next;
  try {
    await next.startReportingFailureItself();
    if (!next.isRunning()) {
      // vscode-languageclient 9 resolves start() when the server closed the connection while starting.
      throw new Error("the server exited while starting");
    }
  } catch (error) {
    await next.serverExited(3000);
    reportStartFailure(interpreter, error);
    return;
  }
  await commands.refresh().catch((error: unknown) => log.warn(`Reading the status: ${String(error)}`));
}

/** One message for a server that did not start: the cause from its stderr, and the setting to change. */
function reportStartFailure(interpreter: string[], error: unknown): void {
  channel.flushStderr();
  const stderr = channel.stderrTail.all();
  log.error(`The arena-ls server did not start: ${String(error)}`);
  if (stderr.length > 0) {
    log.error(`Its last lines on stderr:\n${stderr.join("\n")}`);
  }
  const openSettings = "Open Settings";
  const showLog = "Show Log";
  void vscode.window
    .showErrorMessage(startFailureMessage(interpreter, stderr, error), openSettings, showLog)
    .then((answer) => {
      if (answer === openSettings) {
        void vscode.commands.executeCommand("workbench.action.openSettings", "arena.interpreter");
      } else if (answer === showLog) {
        log.show(true);
      }
    });
}

async function stopClient(): Promise<void> {
  const running = client;
  client = undefined;
  commands.detach();
  if (running) {
    try {
      await running.stop();
    } catch (error) {
      log.warn(`Stopping the server: ${String(error)}`);
    }
  }
}

/** Serialises starts and stops, so that a burst of setting changes leaves one server. */
function restart(why: string): Promise<void> {
  lifecycle = lifecycle.then(async () => {
    log.info(`Restarting the server: ${why}`);
    await stopClient();
    await startClient();
  });
  return lifecycle;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  log = vscode.window.createOutputChannel("Arena", { log: true });
  channel = new LeveledChannel(log);
  traceChannel = new TraceChannel(log);
  commands = new Commands(log);
  context.subscriptions.push(log, commands);
  commands.register(context);
  context.subscriptions.push(vscode.commands.registerCommand("arena.restartServer", () => restart("asked for")));
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (needsRestart((key) => event.affectsConfiguration(key, workspaceResource()))) {
        void restart("settings changed");
      }
    }),
  );
  const api = await pythonExtensionApi();
  if (api?.environments?.onDidChangeActiveEnvironmentPath) {
    context.subscriptions.push(
      api.environments.onDidChangeActiveEnvironmentPath(() => {
        if (!hasValue(vscode.workspace.getConfiguration("arena", workspaceResource()).get("interpreter"))) {
          void restart("the Python environment changed");
        }
      }),
    );
  }
  lifecycle = lifecycle.then(startClient);
  await lifecycle;
}

export async function deactivate(): Promise<void> {
  await lifecycle;
  await stopClient();
}
