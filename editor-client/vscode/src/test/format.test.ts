import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  blockedDialog,
  blockedList,
  kindLabel,
  formatEta,
  formatLogLine,
  formatLoss,
  healthLines,
  jobPicks,
  percentDone,
  runStatusText,
  runTooltip,
  statusReport,
} from "../core/format";
import type { JobInfo, RunInfo } from "../core/protocol";

const running: RunInfo = {
  runId: "20250101-tiny-lm-1",
  jobId: "tiny-lm",
  status: "running",
  step: 900,
  totalSteps: 2000,
  loss: 2.3104,
  stepsPerSecond: 3.2,
  etaSeconds: 190,
  stalled: false,
  lastCheckpoint: null,
};

describe("runStatusText", () => {
  it("shows job, step/total, percent, loss and ETA of a running run", () => {
    assert.equal(runStatusText(running), "⟳ tiny-lm 900/2000 (45%) · loss 2.31 · ETA 3m");
  });

  it("names any status other than running, and drops the ETA once the run is over", () => {
    assert.equal(runStatusText({ ...running, status: "stopped" }), "■ tiny-lm stopped 900/2000 (45%) · loss 2.31");
    assert.equal(runStatusText({ ...running, status: "succeeded", step: 2000 }), "✓ tiny-lm succeeded 2000/2000 (100%) · loss 2.31");
  });

  it("copes with a run that announced nothing yet (missing keys, as Neovim 0.7 delivers nulls)", () => {
    assert.equal(runStatusText({ runId: "r", jobId: "tiny-lm", status: "starting" }), "⟳ tiny-lm starting");
    assert.equal(runStatusText({ runId: "r", jobId: "t", status: "running", step: 7 }), "⟳ t step 7");
  });

  it("flags a stalled run and a NaN loss", () => {
    assert.equal(runStatusText({ ...running, loss: Number.NaN, stalled: true }), "⟳ tiny-lm 900/2000 (45%) · loss nan · ETA 3m · stalled");
  });

  it("says where a cluster run runs, and nothing for a local one", () => {
    const onLab = { ...running, cluster: { name: "lab", kind: "ray", address: "http://h:8265", submissionId: "arena-r-1" } };
    assert.equal(runStatusText(onLab), "⟳ tiny-lm @ lab 900/2000 (45%) · loss 2.31 · ETA 3m");
    assert.equal(runStatusText({ ...running, cluster: null }), "⟳ tiny-lm 900/2000 (45%) · loss 2.31 · ETA 3m");
  });
});

describe("numbers", () => {
  it("formats ETAs short", () => {
    assert.equal(formatEta(45.4), "45s");
    assert.equal(formatEta(190), "3m");
    assert.equal(formatEta(3900), "1h05m");
    assert.equal(formatEta(null), undefined);
    assert.equal(formatEta(-1), undefined);
  });

  it("formats losses and percentages", () => {
    assert.equal(formatLoss(0.123456), "0.12");
    assert.equal(formatLoss(1234.5), "1235");
    assert.equal(formatLoss(Infinity), "infinity");
    assert.equal(percentDone({ ...running, totalSteps: 0 }), undefined);
    assert.equal(percentDone({ ...running, step: 2500 }), 100);
  });
});

describe("runTooltip", () => {
  it("lists checkpoint, failure and exit code when known", () => {
    const crashed: RunInfo = {
      ...running,
      status: "crashed",
      exitCode: 1,
      restarts: 2,
      failure: { kind: "oom", evidence: "CUDA out of memory" },
      lastCheckpoint: { step: 500, path: "ckpt.pt" },
    };
    assert.equal(
      runTooltip(crashed),
      [
        "tiny-lm (run 20250101-tiny-lm-1): crashed",
        "3.2 steps/s",
        "last checkpoint: step 500 (ckpt.pt)",
        "restarts: 2",
        "failure: oom (CUDA out of memory)",
        "exit code: 1",
      ].join("\n"),
    );
  });

  it("says a live run has no checkpoint yet", () => {
    assert.match(runTooltip(running), /no checkpoint yet/);
  });
});

describe("jobPicks", () => {
  const jobs: JobInfo[] = [
    { id: "broken", name: "Broken", kind: "train", status: "ready", runnable: false, blockedBy: [{ code: "AR004", message: "no checkpoint save in the training loop" }] },
    { id: "tiny-lm", name: "Tiny LM", kind: "train", status: "approval-required", runnable: true, blockedBy: [] },
    { id: "off", kind: "task", status: "disabled", runnable: false },
    { id: "check", runnable: true },
  ];

  it("lists runnable jobs first, then blocked ones with their reasons", () => {
    assert.deepEqual(jobPicks(jobs), [
      { jobId: "tiny-lm", label: "▶ Tiny LM", description: "tiny-lm · train · needs approval", runnable: true },
      { jobId: "check", label: "▶ check", description: "check · task", runnable: true },
      {
        jobId: "broken",
        label: "⊘ Broken",
        description: "broken · train",
        detail: "AR004: no checkpoint save in the training loop · Enter: details",
        runnable: false,
      },
      { jobId: "off", label: "⊘ off", description: "off · task", detail: "disabled in the manifest · Enter: details", runnable: false },
    ]);
  });

  it("explains a block with no diagnostics", () => {
    assert.deepEqual(blockedList({ id: "x", runnable: false, status: "ready" }), ["not runnable"]);
  });

  const fiveReasons: JobInfo = {
    id: "gated",
    name: "Gated",
    kind: "train",
    status: "ready",
    runnable: false,
    blockedBy: ["AR004", "AR007", "AR008", "AR009", "AR106"].map((code) => ({
      code,
      message: `${code} is a rule whose message is long enough that five of them never fit on one line of a picker`,
    })),
  };

  it("names every blocking code in a short second line that does not say Blocked again", () => {
    const [entry] = jobPicks([fiveReasons]);
    assert.equal(entry.detail, "5 reasons: AR004, AR007, AR008, AR009, AR106 · Enter: all of them");
    assert.ok((entry.detail ?? "").length < 80, entry.detail);
    assert.doesNotMatch(entry.detail ?? "", /blocked/i);
  });

  it("shows every reason whole, one a line, when a blocked job is picked", () => {
    const dialog = blockedDialog(fiveReasons);
    assert.equal(dialog.message, "Gated cannot run (5 reasons)");
    const lines = dialog.detail.split("\n");
    assert.equal(lines.length, 5);
    for (const item of fiveReasons.blockedBy ?? []) {
      assert.ok(lines.includes(`• ${item.code}: ${item.message}`), item.code ?? "");
    }
  });

  it("labels a job with an invalid manifest entry as such, not as a task", () => {
    const invalid: JobInfo = { id: "dup", kind: null, status: null, runnable: false, blockedBy: [{ code: "AR101", message: "duplicate id" }] };
    assert.equal(kindLabel(invalid), "invalid manifest entry");
    assert.equal(jobPicks([invalid])[0].description, "dup · invalid manifest entry");
    assert.match(statusReport({ jobs: [invalid] }), /⊘ dup \(invalid manifest entry\) blocked:/);
    assert.equal(kindLabel({ id: "t", runnable: true }), "task");
    assert.equal(kindLabel({ id: "off", runnable: false, status: "disabled" }), "task");
  });
});

describe("statusReport and health", () => {
  it("shows the active run, jobs and health", () => {
    const report = statusReport({
      active: running,
      runs: [running],
      jobs: [
        { id: "tiny-lm", kind: "train", status: "ready", runnable: true, blockedBy: [] },
        { id: "broken", kind: "train", status: "ready", runnable: false, blockedBy: [{ code: "AR004", message: "no save" }, { code: "AR007", message: "no --resume" }] },
      ],
      health: {
        ram: { totalMb: 16000, availableMb: 12000, percent: 25 },
        cpu: { percent: 12.5, count: 2 },
        battery: null,
        gpus: [],
        gpuError: "no NVIDIA driver",
      },
    });
    assert.match(report, /^Active run: ⟳ tiny-lm 900\/2000 \(45%\) · loss 2.31 · ETA 3m$/m);
    assert.match(report, /^ {2}▶ tiny-lm \(train\) ready$/m);
    assert.match(report, /^ {2}⊘ broken \(train\) blocked:\n {6}AR004: no save\n {6}AR007: no --resume$/m);
    assert.match(report, /^ {2}RAM: 11.7 GB free of 15.6 GB \(25% used\)$/m);
    assert.match(report, /^ {2}Battery: none$/m);
    assert.match(report, /^ {2}GPUs: none \(no NVIDIA driver\)$/m);
  });

  it("describes GPUs and batteries", () => {
    const lines = healthLines({
      battery: { percent: 80, pluggedIn: false },
      gpus: [{ index: 0, name: "H200", utilization: 97, memoryUsedMb: 2048, memoryTotalMb: 143771, temperature: 41 }],
    });
    assert.deepEqual(lines, ["Battery: 80%, on battery", "GPU 0: H200, 97% busy, 2.0 GB / 140.4 GB, 41°C"]);
    assert.deepEqual(healthLines(undefined), ["health: unknown"]);
  });

  it("gives each of the manifest's clusters one line: its nodes, CPUs and GPUs, its error, or not sampled yet", () => {
    const lines = healthLines({
      gpus: [],
      clusters: [
        { name: "lab", nodes: 1, cpus: 2, gpus: 0, gpuNames: [], error: null },
        { name: "big", nodes: 3, cpus: 96, gpus: 1, gpuNames: ["A100"], error: null },
        { name: "down", nodes: null, cpus: null, gpus: null, error: "cluster 'down' is not reachable (Connection refused)" },
        { name: "new", nodes: null, at: null },
      ],
    });
    assert.deepEqual(lines.slice(2), [
      "Cluster lab: 1 node, 2 CPUs, 0 GPUs",
      "Cluster big: 3 nodes, 96 CPUs, 1 GPU (A100)",
      "Cluster down: error: cluster 'down' is not reachable (Connection refused)",
      "Cluster new: not sampled yet",
    ]);
    assert.equal(healthLines({ gpus: [] }).some((line) => line.startsWith("Cluster")), false);
  });

  it("says so when nothing runs and no job exists", () => {
    const report = statusReport({ active: null, jobs: [], runs: [] });
    assert.match(report, /^Active run: none$/m);
    assert.match(report, /^ {2}\(none\)$/m);
  });
});

describe("formatLogLine", () => {
  it("marks stderr and the supervisor's own lines", () => {
    assert.equal(formatLogLine({ seq: 1, stream: "stdout", text: "step 1" }), "step 1");
    assert.equal(formatLogLine({ seq: 2, stream: "stderr", text: "warning" }), "[stderr] warning");
    assert.equal(formatLogLine({ seq: 3, stream: "arena", text: "TRAINING_CRASHED: tiny-lm code -9" }), "[arena] TRAINING_CRASHED: tiny-lm code -9");
  });
});
