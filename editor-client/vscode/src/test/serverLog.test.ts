import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ClientLineClassifier, LineSplitter, ServerLogRouter, StderrClassifier, StderrTail, causeLine, startFailureMessage } from "../core/serverLog";
import type { LevelSink } from "../core/serverLog";

describe("StderrClassifier", () => {
  it("maps the server's log levels and strips its timestamp and level", () => {
    const classifier = new StderrClassifier();
    assert.deepEqual(classifier.classify("2026-11-30 12:00:00,123 INFO arena_ls.protocol.server: started"), {
      level: "info",
      text: "arena_ls.protocol.server: started",
    });
    assert.deepEqual(classifier.classify("2026-11-30 12:00:01,000 WARNING arena_ls.x: low disk"), { level: "warn", text: "arena_ls.x: low disk" });
    assert.deepEqual(classifier.classify("2026-11-30 12:00:02,000 ERROR arena_ls.x: boom"), { level: "error", text: "arena_ls.x: boom" });
    assert.deepEqual(classifier.classify("Traceback (most recent call last):"), { level: "error", text: "Traceback (most recent call last):" });
    assert.deepEqual(classifier.classify("2026-11-30 12:00:03,000 DEBUG arena_ls.x: detail"), { level: "debug", text: "arena_ls.x: detail" });
    assert.deepEqual(classifier.classify("2026-11-30 12:00:04,000 CRITICAL arena_ls.x: dead"), { level: "error", text: "arena_ls.x: dead" });
  });

  it("calls Python's own words on stderr a warning when no log line came first", () => {
    assert.equal(new StderrClassifier().classify("/usr/bin/python3: No module named arena_ls").level, "warn");
  });
});

describe("ClientLineClassifier", () => {
  it("maps the client's levels, strips its time, and keeps data lines at their message's level", () => {
    const classifier = new ClientLineClassifier();
    assert.deepEqual(classifier.classify("[Error - 12:00:00 PM] Request arena/start failed."), { level: "error", text: "Request arena/start failed." });
    assert.deepEqual(classifier.classify("  Message: boom"), { level: "error", text: "  Message: boom" });
    assert.deepEqual(classifier.classify("[Warn  - 12:00:00] careful"), { level: "warn", text: "careful" });
    assert.deepEqual(classifier.classify("[Info  - 12:00:00] fine"), { level: "info", text: "fine" });
  });

  it("does not call a clean exit (an intentional restart) an error, but does a crash", () => {
    const classifier = new ClientLineClassifier();
    assert.deepEqual(classifier.classify("[Error - 12:00:00 PM] Server process exited with code 0."), {
      level: "info",
      text: "Server process exited with code 0.",
    });
    assert.equal(classifier.classify("[Error - 12:00:00 PM] Server process exited with code 1.").level, "error");
  });
});

describe("LineSplitter", () => {
  it("joins a line split across chunks and drops blank lines", () => {
    const splitter = new LineSplitter();
    assert.deepEqual(splitter.push("2026-11-30 12:00:00,1 INFO a: one\r\n2026-11-30 12:00:00,2 INF"), ["2026-11-30 12:00:00,1 INFO a: one"]);
    assert.deepEqual(splitter.push("O a: two\n\n"), ["2026-11-30 12:00:00,2 INFO a: two"]);
    assert.deepEqual(splitter.push("partial"), []);
    assert.deepEqual(splitter.flush(), ["partial"]);
    assert.deepEqual(splitter.flush(), []);
  });
});

describe("the message when the server dies on start", () => {
  it("keeps the last lines only", () => {
    const tail = new StderrTail(2);
    ["a", "b", "c"].forEach((line) => tail.add(line));
    assert.deepEqual(tail.all(), ["b", "c"]);
    tail.clear();
    assert.deepEqual(tail.all(), []);
  });

  it("names the cause from stderr, the interpreter, and the setting", () => {
    const message = startFailureMessage(["/usr/bin/python3"], ["/usr/bin/python3: No module named arena_ls"], new Error("closed"));
    assert.equal(
      message,
      "Arena: the arena-ls server did not start: /usr/bin/python3: No module named arena_ls (interpreter: /usr/bin/python3). " +
        "Install arena-ls into that Python, or set arena.interpreter to one that has it.",
    );
  });

  it("picks the error line of a traceback, and says when the interpreter is missing", () => {
    const traceback = ["Traceback (most recent call last):", '  File "x.py", line 1', "ImportError: cannot import name 'x'", "  hint"];
    assert.equal(causeLine(traceback), "ImportError: cannot import name 'x'");
    assert.equal(causeLine(["2026-11-30 12:00:00,1 ERROR arena_ls: Error: bad settings"]), "arena_ls: Error: bad settings");
    assert.equal(causeLine([]), undefined);
    const spawn = Object.assign(new Error("spawn /nope/python ENOENT"), { code: "ENOENT" });
    assert.match(startFailureMessage(["/nope/python"], [], spawn), /did not start: \/nope\/python was not found \(interpreter: \/nope\/python\)\. .*arena\.interpreter/);
  });
});

describe("ServerLogRouter", () => {
  function recorder(): { sink: LevelSink; written: string[] } {
    const written: string[] = [];
    const at = (level: string) => (text: string) => written.push(`[${level}] ${text}`);
    return { sink: { trace: at("trace"), debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") }, written };
  }

  it("writes stderr chunks as whole lines at their level, with one timestamp (the channel's)", () => {
    const { sink, written } = recorder();
    const router = new ServerLogRouter(sink);
    router.stderr("2026-11-30 12:00:00,123 INFO arena_ls.protocol.server: listening\n2026-11-30 12:00:01,0");
    router.stderr("00 WARNING arena_ls.health: RAM low\n/usr/bin/python3: No module");
    router.flushStderr();
    assert.deepEqual(written, ["[info] arena_ls.protocol.server: listening", "[warn] arena_ls.health: RAM low", "[warn] /usr/bin/python3: No module"]);
    assert.deepEqual(router.tail.all().slice(-1), ["/usr/bin/python3: No module"]);
  });

  it("writes the client's lines at their level, a clean exit as info", () => {
    const { sink, written } = recorder();
    const router = new ServerLogRouter(sink);
    router.clientLines("[Error - 1:00:00 PM] Server process exited with code 0.");
    router.clientLines("[Error - 1:00:00 PM] Request failed.\n  Message: boom");
    assert.deepEqual(written, ["[info] Server process exited with code 0.", "[error] Request failed.", "[error]   Message: boom"]);
    assert.deepEqual(router.tail.all(), []);
  });
});
