// The panel test's world (moved out of panel.test.mjs): a throwaway workspace with the reference
// job and the jobs each test needs, and the demo daemon (demo/daemon.mjs) started on it.
import { spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { AIDE, REPO, ARENA_LS, TEST_SETTINGS } from "../test/support.mjs";

export const WAIT = 120_000;
const RESUME = { args: ["--resume", "--start-step", "{step}"] };

export function referenceWorkspace() {
  const root = mkdtempSync(path.join(os.tmpdir(), "aide-e2e-"));
  cpSync(path.join(REPO, "training"), path.join(root, "training"), { recursive: true });
  mkdirSync(path.join(root, "trainers"));
  cpSync(path.join(REPO, "tests", "fixtures", "trainers", "fake_trainer.py"), path.join(root, "trainers", "fake_trainer.py"));
  writeFileSync(
    path.join(root, "trainers", "gated_train.py"),
    "import torch\n\nmodel = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor step in range(100):\n    model(torch.randn(2, 4)).sum().backward()\n    opt.step()\n",
  );
  const manifest = {
    version: 1,
    jobs: [
      {
        id: "tiny-lm",
        name: "Tiny LM pretraining (reference)",
        kind: "train",
        command: "{python}",
        args: ["training/train.py", "--steps", "3000", "--ckpt-every", "50", "--log-every", "5", "--eval-every", "500"],
        script: "training/train.py",
        env: { OMP_NUM_THREADS: "1" },
        status: "ready",
        resume: RESUME,
        stop: { method: "both", graceSeconds: 60 },
        restart: { maxRestarts: 0, backoffSeconds: 5 },
      },
      {
        id: "noisy",
        name: "Noisy task",
        kind: "task",
        command: "{python}",
        args: ["-c", "import sys; print('<img src=x onerror=window.pwned=1> \\x1b[31mred\\x1b[0m <b>bold</b>', flush=True); print('to stderr \\x1b[1mbright', file=sys.stderr, flush=True)"],
        status: "ready",
      },
      {
        id: "crashing",
        name: "Crashing task",
        kind: "task",
        command: "{python}",
        args: ["-c", "import sys; print('Traceback: something broke', file=sys.stderr, flush=True); sys.exit(3)"],
        status: "ready",
      },
      {
        id: "no-checkpoint",
        name: "Trainer without checkpoints yet",
        kind: "train",
        command: "{python}",
        args: ["trainers/fake_trainer.py", "--steps", "100000", "--interval", "0.05"],
        script: "trainers/fake_trainer.py",
        status: "ready",
        resume: RESUME,
        restart: { maxRestarts: 0, backoffSeconds: 1 },
      },
      {
        id: "short",
        name: "Short trainer",
        kind: "train",
        command: "{python}",
        args: ["trainers/fake_trainer.py", "--steps", "20", "--interval", "0.02", "--ckpt-every", "10"],
        script: "trainers/fake_trainer.py",
        status: "ready",
        resume: RESUME,
        restart: { maxRestarts: 0, backoffSeconds: 1 },
      },
      { id: "gated", name: "Gated trainer", kind: "train", command: "{python}", args: ["trainers/gated_train.py"], script: "trainers/gated_train.py", status: "ready", resume: RESUME },
    ],
  };
  writeFileSync(path.join(root, "training", "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  return root;
}

export function startDemo(root, port = 0, uiPort = 0) {
  const child = spawn(
    process.execPath,
    [path.join(AIDE, "demo", "daemon.mjs"), "--workspace", root, "--port", String(port), "--ui-port", String(uiPort), "--arena-ls", ARENA_LS, "--settings", JSON.stringify(TEST_SETTINGS)],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  return new Promise((resolve, reject) => {
    let out = "";
    let err = "";
    const timer = setTimeout(() => reject(new Error(`the demo daemon did not say it listens: ${err}`)), WAIT);
    const check = () => {
      const api = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      const ui = /page: (http:\/\/127\.0\.0\.1:\d+)\//.exec(err);
      const tokenFile = /token file: (.+)\n/.exec(err);
      if (api && ui && tokenFile) {
        clearTimeout(timer);
        // The owner's scripts read the page's secret from the daemon's 0600 token file.
        resolve({ child, api: api[1], ui: ui[1], token: readFileSync(tokenFile[1], "utf8").trim() });
      }
    };
    child.stdout.on("data", (chunk) => {
      out += chunk;
      check();
    });
    child.stderr.on("data", (chunk) => {
      err += chunk;
      if (process.env.AIDE_TEST_VERBOSE) {
        process.stderr.write(chunk);
      }
      check();
    });
    child.once("exit", (code) => reject(new Error(`the demo daemon exited with ${code}: ${err}`)));
  });
}
