// verify-gates.sh (the SOP's gates 1-11 with curl) passes against the demo
// daemon on the reference job (a copy of the repo's training/, its manifest as is).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { AIDE, REPO, ARENA_LS, TEST_SETTINGS } from "./support.mjs";

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function run(command, args) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (chunk) => (out += chunk));
    child.stderr.on("data", (chunk) => (out += chunk));
    child.once("close", (code) => resolve({ code, out }));
  });
}

test("verify-gates.sh: gates 1-11 pass on the reference job (6 skipped without an NVIDIA GPU)", async () => {
  const workspace = mkdtempSync(path.join(os.tmpdir(), "aide-gates-"));
  try {
    cpSync(path.join(REPO, "training"), path.join(workspace, "training"), { recursive: true });
    const port = await freePort();
    const { code, out } = await run("bash", [
      path.join(AIDE, "verify-gates.sh"),
      "--workspace", workspace,
      "--port", String(port),
      "--arena-ls", ARENA_LS,
      "--settings", JSON.stringify(TEST_SETTINGS),
    ]);
    process.stdout.write(out);
    assert.equal(code, 0, out);
    for (const gate of [1, 2, 3, 4, 5, 7, 8, 9, 10, 11]) {
      assert.match(out, new RegExp(`^PASS gate ${gate} `, "m"), `gate ${gate}`);
    }
    assert.match(out, /^(PASS|SKIP) gate 6 /m);
    assert.doesNotMatch(out, /^FAIL/m);
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
});
