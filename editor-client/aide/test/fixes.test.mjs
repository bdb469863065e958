// The panel's quick fixes (issue 35, item 5): GET /api/training/fixes and POST /api/training/fix
// through a real arena-ls, on a Hugging Face trainer and a plain one; and lib/fixes.mjs's edits.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { makeWorkspace, startDaemon, request, post, waitFor, REPO } from "./support.mjs";
import { FixRefused, applyTextEdits, offerable, planEdit } from "../lib/fixes.mjs";

const HF_TRAINER = `from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

parser = HfArgumentParser(TrainingArguments)
(training_args,) = parser.parse_args_into_dataclasses()
model = AutoModelForCausalLM.from_pretrained("gpt2")
trainer = Trainer(
    model=model,
    args=training_args,
)
trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
`;
const HF_JOB = {
  id: "hf",
  name: "hf trainer",
  kind: "train",
  command: "{python}",
  args: ["hf/train.py"],
  script: "hf/train.py",
  status: "ready",
  resume: { args: ["--resume_from_checkpoint", "{path}"] },
};
const PLAIN_TRAINER = `import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(args.steps):
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    opt.step()
`;
const PLAIN_JOB = { ...HF_JOB, id: "plain", name: "plain trainer", args: ["plain/train.py"], script: "plain/train.py", resume: { args: ["--resume", "--start-step", "{step}"] } };
const KIT = readFileSync(path.join(REPO, "arena_trainer.py"), "utf8");

let workspace;
let daemon;

before(async () => {
  workspace = makeWorkspace();
  const manifestFile = path.join(workspace.root, "training", "manifest.json");
  const manifest = JSON.parse(readFileSync(manifestFile, "utf8"));
  manifest.jobs.push(HF_JOB, PLAIN_JOB);
  writeFileSync(manifestFile, `${JSON.stringify(manifest, null, 2)}\n`);
  for (const [folder, text] of [["hf", HF_TRAINER], ["plain", PLAIN_TRAINER]]) {
    mkdirSync(path.join(workspace.root, folder));
    writeFileSync(path.join(workspace.root, folder, "train.py"), text);
  }
  daemon = await startDaemon(workspace.root);
});

after(async () => {
  await daemon.close();
  workspace.remove();
});

async function blockedCodes(id) {
  const { json } = await request(daemon.base, "/api/training/status");
  return new Set(json.jobs.find((job) => job.id === id).blockedBy.map((item) => item.code));
}

test("a blocked Hugging Face trainer is offered the adoption actions, never a suppression", async () => {
  await waitFor("the hf job's findings", async () => (await blockedCodes("hf")).has("AR001"));
  const answer = await request(daemon.base, "/api/training/fixes?id=hf");
  assert.equal(answer.status, 200, JSON.stringify(answer.json));
  const titles = answer.json.fixes.map((fix) => fix.title);
  assert.ok(titles.includes("Add arena-ls's callback"), titles.join(", "));
  assert.ok(titles.includes("Add the trainer kit beside this script"), titles.join(", "));
  assert.ok(!titles.some((title) => title.startsWith("Suppress")), titles.join(", "));
  const callback = answer.json.fixes.find((fix) => fix.title === "Add arena-ls's callback");
  assert.ok(callback.codes.includes("AR001") && callback.codes.includes("AR002"), callback.codes.join(", "));
  assert.equal(new Set(titles).size, titles.length, "one entry per fix");
});

test("POST /api/training/fix applies the callback with the kit beside it; the job runs; a fix no longer offered is a 409", async () => {
  await waitFor("the hf job's findings", async () => (await blockedCodes("hf")).has("AR001"));
  const file = path.join(workspace.root, "hf", "train.py");
  const applied = await post(daemon.base, "/api/training/fix", { id: "hf", title: "Add arena-ls's callback" });
  assert.equal(applied.status, 200, JSON.stringify(applied.json));
  assert.deepEqual(applied.json, {
    id: "hf",
    applied: ["Add arena-ls's callback", "Add the trainer kit beside this script"],
    files: ["hf/train.py", "hf/arena_trainer.py"],
  });
  const text = readFileSync(file, "utf8");
  assert.match(text, /^from arena_trainer import HFCallback$/m);
  assert.match(text, / {4}callbacks=\[HFCallback\(\)\],\n\)/);
  assert.equal(readFileSync(path.join(workspace.root, "hf", "arena_trainer.py"), "utf8"), KIT, "the kit's own bytes");
  await waitFor("the hf job runnable", async () => {
    const { json } = await request(daemon.base, "/api/training/status");
    return json.jobs.find((job) => job.id === "hf").runnable === true;
  });
  const again = await post(daemon.base, "/api/training/fix", { id: "hf", title: "Add arena-ls's callback" });
  assert.equal(again.status, 409);
  assert.equal(again.json.reason, "fix-gone");
  assert.equal(readFileSync(file, "utf8"), text, "nothing written twice");
});

test("a plain trainer's gate fixes apply too (the --resume option), one at a time; the kit alone answers no finding", async () => {
  const file = path.join(workspace.root, "plain", "train.py");
  await waitFor("the plain job's findings", async () => (await blockedCodes("plain")).has("AR007"));
  const { json } = await request(daemon.base, "/api/training/fixes?id=plain");
  const resume = json.fixes.find((fix) => fix.title === "Add a --resume option");
  assert.ok(resume, JSON.stringify(json.fixes));
  assert.deepEqual(resume.codes, ["AR007"]);
  assert.deepEqual(json.fixes.find((fix) => fix.title === "Add the trainer kit beside this script")?.codes, []);
  const applied = await post(daemon.base, "/api/training/fix", { id: "plain", title: resume.title });
  assert.equal(applied.status, 200, JSON.stringify(applied.json));
  assert.deepEqual(applied.json.files, ["plain/train.py"], "no kit: this fix does not import it");
  assert.match(readFileSync(file, "utf8"), /^parser\.add_argument\("--resume", action="store_true"/m);
  await waitFor("AR007 gone", async () => !(await blockedCodes("plain")).has("AR007"));
  assert.equal(existsSync(path.join(workspace.root, "plain", "arena_trainer.py")), false);
});

test("the fix routes refuse what they must: no token 403, unknown job 404, no title 400, unknown fix 409", async () => {
  const noToken = await request(daemon.base, "/api/training/fixes?id=hf", { token: null });
  assert.equal(noToken.status, 403);
  const posted = await post(daemon.base, "/api/training/fix", { id: "hf", title: "Add arena-ls's callback" }, {}, null);
  assert.equal(posted.status, 403);
  assert.equal((await request(daemon.base, "/api/training/fixes?id=nope")).status, 404);
  assert.equal((await request(daemon.base, "/api/training/fixes")).status, 404);
  assert.equal((await post(daemon.base, "/api/training/fix", { id: "gated" })).status, 400);
  const suppress = await post(daemon.base, "/api/training/fix", { id: "gated", title: "Suppress AR007 on this line" });
  assert.equal(suppress.status, 409, "a suppression is never applied from the panel");
  const unknown = await post(daemon.base, "/api/training/fix", { id: "gated", title: "Delete everything" });
  assert.equal(unknown.status, 409);
  assert.equal(unknown.json.reason, "fix-gone");
  const fake = await request(daemon.base, "/api/training/fixes?id=fake");
  assert.deepEqual(fake.json, { id: "fake", fixes: [] }, "a runnable job has nothing to fix");
});

// -- lib/fixes.mjs ------------------------------------------------------------------------

test("applyTextEdits counts UTF-16 units and keeps CRLF lines", () => {
  const text = "a = '😀'\r\nb = 2\r\n";
  const edits = [
    { range: { start: { line: 0, character: 8 }, end: { line: 0, character: 8 } }, newText: "  # smile" },
    { range: { start: { line: 1, character: 4 }, end: { line: 1, character: 5 } }, newText: "3" },
    { range: { start: { line: 2, character: 0 }, end: { line: 2, character: 0 } }, newText: "c = 4\r\n" },
  ];
  assert.equal(applyTextEdits(text, edits), "a = '😀'  # smile\r\nb = 3\r\nc = 4\r\n");
  const past = [{ range: { start: { line: 1, character: 99 }, end: { line: 1, character: 99 } }, newText: "!" }];
  assert.equal(applyTextEdits(text, past), "a = '😀'\r\nb = 2!\r\n", "a character past the line's end stops at it");
  const overlapping = [
    { range: { start: { line: 0, character: 0 }, end: { line: 0, character: 3 } }, newText: "x" },
    { range: { start: { line: 0, character: 2 }, end: { line: 0, character: 4 } }, newText: "y" },
  ];
  assert.throws(() => applyTextEdits(text, overlapping), FixRefused);
});

test("planEdit writes only the job's trainer and the kit beside it, never over a file", () => {
  const root = path.resolve("/ws");
  const script = path.join(root, "t", "train.py");
  const uri = (file) => pathToFileURL(file).href;
  const insert = [{ range: { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } }, newText: "x" }];
  assert.equal(planEdit({ changes: { [uri(script)]: insert } }, { root, script }).length, 1);
  const kit = path.join(root, "t", "arena_trainer.py");
  const created = planEdit({ documentChanges: [{ kind: "create", uri: uri(kit), options: { overwrite: false, ignoreIfExists: true } }, { textDocument: { uri: uri(kit), version: null }, edits: insert }] }, { root, script });
  assert.deepEqual(created.map((step) => [step.file, step.create]), [[kit, true]]);
  for (const edit of [
    { changes: { [uri(path.join(root, "t", "other.py"))]: insert } },
    { changes: { [uri(path.resolve("/etc/passwd"))]: insert } },
    { changes: { [uri(path.join(root, "training", "manifest.json"))]: insert } },
    { documentChanges: [{ kind: "create", uri: uri(kit), options: { overwrite: true } }] },
    { documentChanges: [{ kind: "create", uri: uri(path.join(root, "t", "evil.py")) }] },
    { documentChanges: [{ kind: "delete", uri: uri(script) }] },
    { documentChanges: [{ kind: "rename", oldUri: uri(script), newUri: uri(kit) }] },
  ]) {
    assert.throws(() => planEdit(edit, { root, script }), FixRefused, JSON.stringify(edit));
  }
  assert.equal(offerable({ title: "Suppress AR001 on this line", kind: "quickfix", edit: {} }), false);
  assert.equal(offerable({ title: "Add arena-ls's callback", kind: "quickfix", edit: {} }), true);
  assert.equal(offerable({ title: "Add the trainer kit beside this script", kind: "quickfix", disabled: { reason: "x" } }), false);
  assert.equal(existsSync(kit), false);
});
