// verify-gates.sh (the SOP's gates 1-11 with curl) passes against the demo
// daemon on the reference job (verify-gates.sh copies the repo's training/, its manifest as is).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { AIDE, REPO, ARENA_LS, TEST_SETTINGS } from "./support.mjs";

function run(command, args) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (chunk) => (out += chunk));
    child.stderr.on("data", (chunk) => (out += chunk));
    child.once("close", (code) => resolve({ code, out }));
  });
}

/** The run folders of the clone's own workspace (the person's runs): verify-gates.sh must add none. */
function cloneRuns() {
  const runs = path.join(REPO, ".aide", "training", "runs");
  return existsSync(runs) ? readdirSync(runs).sort() : [];
}

/** Holds 127.0.0.1:4777 the way the README's demo daemon does (if something else holds it, it is taken all the same). */
function hold(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(null));
    server.listen(port, "127.0.0.1", () => resolve(server));
  });
}

test("verify-gates.sh: gates 1-11 pass on the reference job (6 skipped without an NVIDIA GPU), beside a daemon on 4777, in a throwaway workspace", async () => {
  // Issue 38, as a new user: the README starts the demo daemon on 4777 and then runs verify-gates.sh, which
  // must neither collide with it (EADDRINUSE) nor start, kill -9 and stop runs in the person's own clone.
  const holder = await hold(4777);
  const before = cloneRuns();
  try {
    const { code, out } = await run("bash", [
      path.join(AIDE, "verify-gates.sh"),
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
    assert.doesNotMatch(out, /127\.0\.0\.1:4777\b/, "it used the port the person's daemon holds");
    assert.deepEqual(cloneRuns(), before, "it ran in the clone's own workspace");
  } finally {
    holder?.close();
  }
});
