import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  asArgv,
  buildServerCommand,
  manifestPattern,
  needsRestart,
  objectReader,
  resolveInterpreter,
  serverSettings,
} from "../core/settings";

describe("resolveInterpreter", () => {
  it("prefers the arena.interpreter setting", () => {
    assert.deepEqual(
      resolveInterpreter({ setting: ["/opt/py/bin/python", "-E"], pythonExtension: "/venv/bin/python", platform: "linux" }),
      ["/opt/py/bin/python", "-E"],
    );
  });

  it("accepts the setting as one string", () => {
    assert.deepEqual(resolveInterpreter({ setting: " /usr/bin/python3 ", platform: "linux" }), ["/usr/bin/python3"]);
  });

  it("falls back to the Python extension's environment", () => {
    assert.deepEqual(resolveInterpreter({ setting: [], pythonExtension: "/venv/bin/python", platform: "linux" }), [
      "/venv/bin/python",
    ]);
  });

  it("falls back to python3, or plain py on Windows (which honours an active VIRTUAL_ENV)", () => {
    assert.deepEqual(resolveInterpreter({ setting: undefined, platform: "linux" }), ["python3"]);
    assert.deepEqual(resolveInterpreter({ setting: [""], platform: "win32" }), ["py"]);
    assert.deepEqual(resolveInterpreter({ setting: 42, pythonExtension: "", platform: "darwin" }), ["python3"]);
  });
});

describe("asArgv", () => {
  it("drops blank parts and rejects non-string lists", () => {
    assert.deepEqual(asArgv(["py", " ", "-3"]), ["py", "-3"]);
    assert.deepEqual(asArgv(["py", 3]), []);
    assert.deepEqual(asArgv(null), []);
  });
});

describe("buildServerCommand", () => {
  it("runs the module with the interpreter's own arguments first and serverArgs last", () => {
    assert.deepEqual(buildServerCommand(["py", "-3"], ["--log-level", "debug"]), {
      command: "py",
      args: ["-3", "-m", "arena_ls", "--log-level", "debug"],
    });
  });

  it("ignores serverArgs that are not a list of strings", () => {
    assert.deepEqual(buildServerCommand(["python3"], { bad: true }), { command: "python3", args: ["-m", "arena_ls"] });
  });

  it("refuses an empty interpreter", () => {
    assert.throws(() => buildServerCommand([], []), /no interpreter/);
  });
});

describe("serverSettings", () => {
  const vscodeLike = {
    interpreter: ["/x/python"],
    serverArgs: ["-v"],
    trace: { server: "verbose" },
    manifest: "training/manifest.json",
    stateDir: ".aide/training",
    python: null,
    preflight: { minFreeRamMb: 2048, requirePluggedIn: false, gpuContention: "warn", minFreeDiskMb: 1024 },
    device: { fp32Only: null },
    logs: { notifyHz: 10 },
    watchdog: { stallSeconds: 600 },
  };

  it("nests the server's keys and leaves the client's out", () => {
    assert.deepEqual(serverSettings(objectReader(vscodeLike)), {
      manifest: "training/manifest.json",
      stateDir: ".aide/training",
      preflight: { minFreeRamMb: 2048, requirePluggedIn: false, gpuContention: "warn", minFreeDiskMb: 1024 },
      device: { fp32Only: null },
      logs: { notifyHz: 10 },
      watchdog: { stallSeconds: 600 },
    });
  });

  it("passes python as a path or as an argument list", () => {
    assert.equal(serverSettings(objectReader({ python: "/usr/bin/python3" })).python, "/usr/bin/python3");
    assert.deepEqual(serverSettings(objectReader({ python: ["py", "-3.10", "-E"] })).python, ["py", "-3.10", "-E"]);
    assert.equal("python" in serverSettings(objectReader({ python: [] })), false);
    assert.equal("python" in serverSettings(objectReader({ python: "" })), false);
  });

  it("reads flat dotted keys too, and skips blank strings", () => {
    const read = objectReader({ "preflight.minFreeDiskMb": 10, manifest: "  " });
    assert.deepEqual(serverSettings(read), { preflight: { minFreeDiskMb: 10 } });
  });

  it("passes the clusters' settings, and leaves an empty clusters object out", () => {
    const lab = { address: "http://127.0.0.1:8265", tokenFile: "/home/me/lab.token", python: "/opt/venv/bin/python" };
    assert.deepEqual(serverSettings(objectReader({ clusters: { lab } })), { clusters: { lab } });
    assert.equal("clusters" in serverSettings(objectReader({ clusters: {} })), false);
  });

  it("passes the insights' and the probe's settings, false, 0 and a null thermalMaxCelsius included", () => {
    const read = objectReader({
      insights: { enabled: false, gradWarmupSteps: 0, gpuBubbleFraction: 0.5, thermalMaxCelsius: null },
      "probe.allowWithoutGpu": true,
      probe: { sampleSeconds: 0.1 },
    });
    assert.deepEqual(serverSettings(read), {
      insights: { enabled: false, gradWarmupSteps: 0, gpuBubbleFraction: 0.5, thermalMaxCelsius: null },
      probe: { allowWithoutGpu: true, sampleSeconds: 0.1 },
    });
    assert.deepEqual(serverSettings(objectReader({ insights: { thermalMaxCelsius: 83 } })), {
      insights: { thermalMaxCelsius: 83 },
    });
  });

  it("gives an empty object for no settings at all", () => {
    assert.deepEqual(serverSettings(objectReader(undefined)), {});
    assert.deepEqual(serverSettings(() => undefined), {});
  });
});

describe("needsRestart", () => {
  it("restarts for the interpreter and for server settings, not for tracing", () => {
    assert.equal(needsRestart((key) => key === "arena.interpreter"), true);
    assert.equal(needsRestart((key) => key === "arena.preflight.minFreeRamMb"), true);
    assert.equal(needsRestart((key) => key === "arena.insights.lossSpikeWindow"), true);
    assert.equal(needsRestart((key) => key === "arena.probe.sampleSeconds"), true);
    assert.equal(needsRestart((key) => key === "arena.trace.server"), false);
    assert.equal(needsRestart(() => false), false);
  });
});

describe("manifestPattern", () => {
  it("matches the manifest anywhere under a workspace folder", () => {
    assert.equal(manifestPattern(undefined), "**/training/manifest.json");
    assert.equal(manifestPattern("./jobs/m.json"), "**/jobs/m.json");
    assert.equal(manifestPattern("C:\\work\\m.json"), "C:/work/m.json");
    assert.equal(manifestPattern("/abs/m.json"), "/abs/m.json");
  });
});
