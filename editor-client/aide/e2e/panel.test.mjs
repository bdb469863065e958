// The Training Room panel in a real browser (Debian's Chromium, driven by
// puppeteer-core: no browser download) against the demo daemon and a real
// arena-ls running the reference trainer (training/train.py, tiny-lm).
// Screenshots of each state go to e2e/out/ (git-ignored; CI keeps them).
import { test, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, existsSync, writeFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import http from "node:http";
import puppeteer from "puppeteer-core";
import { AIDE } from "../test/support.mjs";
import { WAIT, referenceWorkspace, startDemo } from "./demo.mjs";
import { isRawLine } from "../training-room.js";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const OUT = path.join(AIDE, "e2e", "out");

let workspace;
let daemon;
let browser;
let page;
let profile;

async function shot(name) {
  const file = path.join(OUT, name);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/** Clicks Run on a job once the panel enables it, and approves the start in the panel's dialog. */
async function runJob(id) {
  const selector = `button.tr-run-button[data-job='${id}']`;
  await page.waitForFunction((css) => document.querySelector(css)?.disabled === false, {}, selector);
  await page.click(selector);
  await page.waitForSelector("#arena-dialog:not([hidden]) button[data-answer='Approve and run']");
}

/** fetch() of the daemon's routes as the owner's scripts do: with the page's secret. */
function owned(route, init = {}) {
  return fetch(`${daemon.api}${route}`, { ...init, headers: { ...(init.headers ?? {}), "X-Arena-Token": daemon.token } });
}

async function status() {
  return (await owned("/api/training/status")).json();
}

/** Polls the status route until `check(status)` holds (WAIT at most): an event, not a sleep. */
async function untilStatus(what, check) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    const now = await status();
    if (check(now)) {
      return now;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}: ${JSON.stringify({ active: now.active, lastRun: now.lastRun })}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Clicks Stop in the page itself, in the same turn that sees it enabled: a coordinates click
 * (`page.click`) lands where the button was when it was measured, and once under CI's load
 * nothing was asked and nothing stopped for two minutes after it (the run card had moved, or the
 * button had been re-rendered, between the measure and the press).
 */
async function clickStopOnceEnabled() {
  await page.waitForFunction(() => {
    const stop = document.querySelector("#arena-stop");
    if (!stop || stop.disabled) {
      return false;
    }
    stop.click();
    return true;
  });
}

/**
 * Clicks Stop and answers the stop question if the server asks it: under load the
 * run's last checkpoint can be older than twice its cadence (7.3), and then the stop is
 * refused 1007 with `lastCheckpoint` and `lost` until the person says "Stop anyway".
 * Resolves to the question's text, or null when the stop was not questioned.
 */
async function stopAnsweringTheQuestion(id) {
  await clickStopOnceEnabled();
  const outcome = await page.waitForFunction(
    (job) => {
      if (document.querySelector("#arena-dialog:not([hidden]) button[data-answer='Stop anyway']")) {
        return "asked";
      }
      const pattern = new RegExp(`${job} stopped at step \\d+`);
      return [...document.querySelectorAll("#arena-notices .tr-notice")].some((node) => pattern.test(node.textContent)) ? "stopped" : false;
    },
    {},
    id,
  );
  if ((await outcome.jsonValue()) === "stopped") {
    return null;
  }
  const question = await page.$eval("#arena-dialog .tr-question", (node) => node.textContent);
  await shot(`stop-question-${id}.png`);
  await page.click("#arena-dialog button[data-answer='Stop anyway']");
  return question;
}

before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing (apt-get install -y chromium chromium-driver)`);
  mkdirSync(OUT, { recursive: true });
  workspace = referenceWorkspace();
  daemon = await startDemo(workspace);
  profile = mkdtempSync(path.join(os.tmpdir(), "aide-chromium-"));
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: false,
    args: [
      "--headless=new",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      `--user-data-dir=${profile}`,
      "--window-size=1200,1000",
    ],
    defaultViewport: { width: 1200, height: 1000 },
  });
  page = await browser.newPage();
  page.setDefaultTimeout(WAIT);
  page.on("pageerror", (error) => process.stderr.write(`page error: ${error.message}\n`));
  await page.goto(`${daemon.ui}/`);
  await page.waitForSelector("#arena-jobs li[data-job='tiny-lm']");
});

/** The one test that hands its run to the next on purpose (the reference run that "Stop ends the run" stops). */
// The tests that hand the reference run on to the next one (Run → raw lines → Stop): the hook stops no run after them.
const HANDS_ITS_RUN_ON = new Set([
  "Run on the reference job asks for approval, then the bar moves and log lines arrive",
  "the reference job's @arena announcements are hidden by default; 'show raw lines' shows them, and the choice is kept",
]);

afterEach(async (t) => {
  if (!t.passed && page) {
    // What the page showed when the test failed: a screenshot and the HTML, in e2e/out/.
    const name = `failed-${t.name.replace(/[^a-z0-9]+/gi, "-").slice(0, 60)}`;
    await shot(`${name}.png`).catch(() => {});
    await writeFile(path.join(OUT, `${name}.html`), await page.content()).catch(() => {});
  }
  // Each test leaves no question open and no run active for the next.
  await page?.evaluate(() => document.querySelector("#arena-dialog:not([hidden]) button[data-answer='Cancel']")?.click()).catch(() => {});
  if (daemon && !(t.passed && HANDS_ITS_RUN_ON.has(t.name)) && (await status()).active) {
    await owned(`/api/training/stop`, { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"confirm": true}' });
    await untilStatus("no run active", (now) => now.active === null);
  }
});

after(async () => {
  if (daemon) {
    await owned(`/api/training/stop`, { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"confirm": true}' }).catch(() => {});
  }
  await browser?.close();
  if (daemon) {
    const gone = new Promise((resolve) => daemon.child.once("exit", resolve));
    daemon.child.kill("SIGTERM");
    await gone;
  }
  rmSync(profile, { recursive: true, force: true });
  rmSync(workspace, { recursive: true, force: true });
});

test("Run is disabled for a gated trainer, with its reasons (file and line)", async () => {
  // The gates judge the trainers after the page's first status (a status never waits for them):
  // seconds on a loaded machine, during which no job can be run yet. Their verdict first.
  await page.waitForFunction(() => document.querySelector("button.tr-run-button[data-job='tiny-lm']")?.disabled === false);
  await page.waitForSelector("li[data-job='gated'] .tr-reason");
  const disabled = await page.$eval("button.tr-run-button[data-job='gated']", (button) => button.disabled);
  assert.equal(disabled, true);
  const reasons = await page.$$eval("li[data-job='gated'] .tr-reason", (items) => items.map((item) => item.textContent));
  assert.ok(reasons.length >= 1);
  for (const reason of reasons) {
    assert.match(reason, /^AR\d{3} .+ trainers\/gated_train\.py:\d+$/);
  }
  assert.equal(await page.$eval("button.tr-run-button[data-job='tiny-lm']", (button) => button.disabled), false);
  const health = await page.$$eval("#arena-health li", (items) => items.map((item) => item.textContent));
  assert.ok(health.some((line) => line.startsWith("RAM:")));
  assert.ok(health.some((line) => line.startsWith("GPU")));
  assert.ok(health.some((line) => line.startsWith("Battery:")));
  await shot("1-gated-job-blocked.png");
});

test("a blocked Hugging Face trainer is offered its fixes under Cannot run; Fix: Add arena-ls's callback asks, applies it with the kit, and the job can run", async () => {
  // Issue 35, item 5: the panel offers the adoption actions where it shows the gate findings.
  const hf = path.join(workspace, "hf");
  mkdirSync(hf);
  writeFileSync(
    path.join(hf, "train.py"),
    "from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments\n\n" +
      "parser = HfArgumentParser(TrainingArguments)\n(training_args,) = parser.parse_args_into_dataclasses()\n" +
      'model = AutoModelForCausalLM.from_pretrained("gpt2")\ntrainer = Trainer(model=model, args=training_args)\n' +
      "trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)\n",
  );
  const manifestFile = path.join(workspace, "training", "manifest.json");
  const original = readFileSync(manifestFile, "utf8");
  const manifest = JSON.parse(original);
  manifest.jobs.push({ id: "hf", name: "HF trainer", kind: "train", command: "{python}", args: ["hf/train.py"], script: "hf/train.py", status: "ready", resume: { args: ["--resume_from_checkpoint", "{path}"] } });
  writeFileSync(manifestFile, `${JSON.stringify(manifest, null, 2)}\n`);
  try {
    await applyTheCallbackFromThePanel(hf);
  } finally {
    writeFileSync(manifestFile, original); // the other tests count the workspace's own jobs
    rmSync(hf, { recursive: true, force: true });
  }
  await page.waitForFunction(() => !document.querySelector("li[data-job='hf']"), { timeout: WAIT });
});

async function applyTheCallbackFromThePanel(hf) {
  const fix = "li[data-job='hf'] button.tr-fix-button[data-fix=\"Add arena-ls's callback\"]";
  await page.waitForSelector(fix, { timeout: WAIT });
  const offered = await page.$$eval("li[data-job='hf'] button.tr-fix-button", (buttons) => buttons.map((button) => button.textContent));
  assert.ok(offered.includes("Fix: Add the trainer kit beside this script"), offered.join(" | "));
  assert.ok(!offered.some((text) => text.includes("Suppress")), offered.join(" | "));
  assert.equal(await page.$eval("button.tr-run-button[data-job='hf']", (button) => button.disabled), true);
  await shot("1b-fixes-offered.png");
  await page.click(fix);
  await page.waitForSelector("#arena-dialog:not([hidden]) button[data-answer='Apply']");
  assert.match(await page.$eval("#arena-dialog .tr-question", (node) => node.textContent), /Add arena-ls's callback.+edits the file on disk/);
  await page.click("#arena-dialog button[data-answer='Apply']");
  await page.waitForFunction(() => document.querySelector("button.tr-run-button[data-job='hf']")?.disabled === false, { timeout: WAIT });
  assert.match(readFileSync(path.join(hf, "train.py"), "utf8"), /callbacks=\[HFCallback\(\)\]/);
  assert.ok(existsSync(path.join(hf, "arena_trainer.py")), "the kit came with the callback");
  const notices = await page.$$eval(".tr-notice.tr-info span", (items) => items.map((item) => item.textContent));
  assert.ok(notices.some((text) => text.includes("Add arena-ls's callback and Add the trainer kit beside this script")), notices.join(" | "));
  assert.equal(await page.$$eval("li[data-job='hf'] button.tr-fix-button", (buttons) => buttons.length), 0);
  await shot("1c-fix-applied.png");
}

test("Run on the reference job asks for approval, then the bar moves and log lines arrive", async () => {
  await runJob("tiny-lm");
  const question = await page.$eval("#arena-dialog .tr-question", (node) => node.textContent);
  assert.match(question, /needs your approval/);
  await page.click("#arena-dialog button[data-answer='Approve and run']");

  await page.waitForFunction(() => /^step \d+\/3000/.test(document.querySelector("#arena-progress-text")?.textContent ?? ""));
  const stepOf = () => page.$eval("#arena-progress-text", (node) => Number(/^step (\d+)/.exec(node.textContent)?.[1] ?? -1));
  const first = await stepOf();
  await page.waitForFunction((step) => Number(/^step (\d+)/.exec(document.querySelector("#arena-progress-text").textContent)?.[1] ?? -1) > step, {}, first);
  await page.waitForFunction(() => document.querySelectorAll("#arena-log .tr-line").length > 10);
  await page.waitForFunction(() => parseFloat(document.querySelector("#arena-progress-fill").style.width) > 0);
  await page.waitForFunction(() => /last checkpoint: step \d+/.test(document.querySelector("#arena-checkpoint").textContent));
  await page.waitForFunction(() => / · loss [0-9.]+/.test(document.querySelector("#arena-progress-text").textContent) && /it\/s/.test(document.querySelector("#arena-progress-text").textContent));
  const text = await page.$eval("#arena-progress-text", (node) => node.textContent);
  assert.match(text, /^step \d+\/3000 \(\d+%\) · loss [0-9.]+ · [0-9.]+ it\/s( · ETA \S+)?$/);
  assert.equal(await page.$eval("#arena-stop", (button) => button.disabled), false);
  assert.equal(await page.$eval("button.tr-run-button[data-job='tiny-lm']", (button) => button.disabled), true, "Run is off while a run is active");
  const html = await page.$eval("#arena-log", (node) => node.innerHTML);
  assert.doesNotMatch(html, /<script|\u001b\[/);
  await shot("2-reference-job-running.png");
});

test("the reference job's @arena announcements are hidden by default; 'show raw lines' shows them, and the choice is kept", async () => {
  const rows = () => page.$$eval("#arena-log .tr-line", (nodes) => nodes.map((node) => node.textContent));
  assert.equal(await page.$eval("#arena-show-raw", (box) => box.checked), false);
  assert.match(await page.$eval(".tr-log-head", (node) => node.textContent), /show raw lines/);
  const hidden = await rows();
  assert.ok(hidden.some((text) => /^step \d+\/3000/.test(text)), "the trainer's readable step lines are shown");
  assert.deepEqual(hidden.filter((text) => text.startsWith("@arena {")), [], "no announcement by default");
  await page.click("#arena-show-raw");
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-log .tr-line")].some((node) => /^@arena \{"event": ?"progress"/.test(node.textContent)));
  const shown = await rows();
  assert.ok(shown.some((text) => /^@arena \{"event": ?"health"/.test(text)));
  assert.ok(shown.length > hidden.length);
  await shot("2b-reference-job-raw-lines.png");
  await page.reload();
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-log .tr-line")].some((node) => node.textContent.startsWith("@arena {")));
  assert.equal(await page.$eval("#arena-show-raw", (box) => box.checked), true, "kept in localStorage across a reload");
  await page.click("#arena-show-raw");
  await page.waitForFunction(() => ![...document.querySelectorAll("#arena-log .tr-line")].some((node) => node.textContent.startsWith("@arena {")));
  assert.equal(await page.evaluate(() => localStorage.getItem("arena.showRawLines")), "false");
});

test("Stop ends the run and shows the checkpoint step and what was lost", async () => {
  const question = await stopAnsweringTheQuestion("tiny-lm");
  if (question !== null) {
    // The checkpoint looked old (a loaded machine): the question says which checkpoint and how much is lost.
    assert.match(question, /^This run's last checkpoint is step \d+ \(.*saved .+\); stopping it now loses (\d+ steps? \()?\d+ (s|min)\)? of training\. Stop anyway\?$/);
  }
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-notices .tr-notice")].some((node) => / stopped at step \d+/.test(node.textContent)));
  const notice = await page.$$eval("#arena-notices .tr-notice", (nodes) => nodes.map((node) => node.textContent).find((text) => / stopped at step/.test(text)));
  assert.match(notice, /tiny-lm stopped at step \d+; (nothing lost \(checkpoint at step \d+\)|last checkpoint \d+: .+ lost) \(exit code/);
  await page.waitForFunction(() => /No run active · last: tiny-lm stopped/.test(document.querySelector("#arena-run-title").textContent));
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-log .tr-line")].some((node) => /run ended: stopped/.test(node.textContent)));
  assert.match(await page.$eval("#arena-checkpoint", (node) => node.textContent), /checkpoint: step \d+/);
  assert.equal(await page.$eval("#arena-stop", (button) => button.disabled), true);
  await shot("3-reference-job-stopped.png");
});

test("a trainer's output is text, never markup: stderr is marked, ANSI gone, no element made of it", async () => {
  await runJob("noisy");
  await page.click("#arena-dialog button[data-answer='Approve and run']");
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-log .tr-line")].some((node) => /run ended: succeeded/.test(node.textContent)));
  const rows = await page.$$eval("#arena-log .tr-line", (nodes) => nodes.map((node) => ({ cls: node.className, text: node.textContent, html: node.innerHTML })));
  await shot("4-output-is-text.png");
  const markup = rows.find((row) => /tr-stdout/.test(row.cls) && row.text.includes("<img src=x"));
  assert.ok(markup, "the line with markup is shown as text");
  assert.doesNotMatch(markup.text, /\u001b/);
  assert.match(markup.text, /<img src=x onerror=window\.pwned=1> red <b>bold<\/b>/);
  const stderr = rows.find((row) => !/tr-arena/.test(row.cls) && row.text.includes("to stderr"));
  assert.match(stderr.cls, /tr-stderr/);
  assert.match(stderr.html, /^<span class="tr-mark">stderr<\/span>to stderr bright$/);
  assert.equal(await page.$$eval("#arena-log img, #arena-log b", (nodes) => nodes.length), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  await shot("4-output-is-text.png");
});

test("a crash is shown as a notice with its exit code and evidence", async () => {
  await runJob("crashing");
  await page.click("#arena-dialog button[data-answer='Approve and run']");
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-notices .tr-notice.tr-error")].some((node) => /crashing crashed \(exit code 3\)/.test(node.textContent)));
  const notice = await page.$$eval("#arena-notices .tr-notice.tr-error", (nodes) => nodes.map((node) => node.textContent).find((text) => /crashing crashed/.test(text)));
  assert.match(notice, /crashing crashed \(exit code 3\)( — \S+)?/);
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-log .tr-stderr")].some((node) => /Traceback: something broke/.test(node.textContent)));
  await shot("5-crash-notice.png");
});

test("a page of another origin, in the same browser, can neither read the routes nor start a run", async () => {
  const evil = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end("<!doctype html><title>another site</title><p>another site</p>");
  });
  await new Promise((resolve) => evil.listen(0, "127.0.0.1", resolve));
  const other = await browser.newPage();
  try {
    await other.goto(`http://127.0.0.1:${evil.address().port}/`);
    const outcome = await other.evaluate(async (api) => {
      const result = {};
      try {
        await (await fetch(`${api}/api/training/status`)).json();
        result.read = "read it";
      } catch (error) {
        result.read = `blocked: ${error.name}`;
      }
      try {
        await fetch(`${api}/api/training/start`, { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: JSON.stringify({ id: "tiny-lm", approved: true }) });
        result.simple = "sent";
      } catch (error) {
        result.simple = `blocked: ${error.name}`;
      }
      try {
        await fetch(`${api}/api/training/start`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ id: "tiny-lm", approved: true }) });
        result.preflighted = "sent";
      } catch (error) {
        result.preflighted = `blocked: ${error.name}`;
      }
      return result;
    }, daemon.api);
    assert.equal(outcome.read, "blocked: TypeError");
    assert.equal(outcome.preflighted, "blocked: TypeError");
    // Nor read the owner's page (its HTML carries the secret), nor make followers with <img> tags (issue 39).
    const followersBefore = (await (await owned("/health")).json()).arena.followers;
    const secretRead = await other.evaluate(async (ui, api) => {
      for (let index = 0; index < 100; index++) {
        const image = document.createElement("img");
        image.src = `${api}/api/training/logs?format=json&runId=${index % 2 ? ".." : `tiny-lm-20260101T000000-${index.toString(16).padStart(6, "0")}`}`;
        document.body.append(image);
      }
      await Promise.all([...document.images].map((image) => new Promise((resolve) => (image.complete ? resolve() : image.addEventListener("error", resolve, { once: true })))));
      try {
        return await (await fetch(`${ui}/`)).text();
      } catch (error) {
        return `blocked: ${error.name}`;
      }
    }, daemon.ui, daemon.api);
    assert.equal(secretRead, "blocked: TypeError");
    assert.equal((await (await owned("/health")).json()).arena.followers, followersBefore, "an <img> made a follower");
    const status = await (await owned(`/api/training/status`)).json();
    assert.equal(status.active, null, "the foreign page started nothing");
    assert.equal(status.lastRun?.id, "crashing", "the newest run is still the one before the attack");
  } finally {
    await other.close();
    evil.closeAllConnections();
    await new Promise((resolve) => evil.close(resolve));
  }
});

test("Stop of a run with no checkpoint asks first, saying how much it loses; Cancel keeps it running, Stop anyway stops it", async () => {
  await runJob("no-checkpoint");
  await page.click("#arena-dialog button[data-answer='Approve and run']");
  await page.waitForFunction(() => /^step \d+\/100000/.test(document.querySelector("#arena-progress-text").textContent));
  await clickStopOnceEnabled();
  await page.waitForSelector("#arena-dialog:not([hidden]) button[data-answer='Stop anyway']");
  const question = await page.$eval("#arena-dialog .tr-question", (node) => node.textContent);
  assert.match(question, /^This run has no checkpoint yet; stopping it now loses (\d+ (s|min)|less than 1 s) of training\. Stop anyway\?$/);
  await shot("6-stop-asks-before-losing-work.png");
  await page.click("#arena-dialog button[data-answer='Cancel']");
  const still = await (await owned(`/api/training/status`)).json();
  assert.equal(still.active?.id, "no-checkpoint", "Cancel stopped nothing");

  await clickStopOnceEnabled();
  await page.waitForSelector("#arena-dialog:not([hidden]) button[data-answer='Stop anyway']");
  await page.click("#arena-dialog button[data-answer='Stop anyway']");
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-notices .tr-notice")].some((node) => /no-checkpoint stopped at step \d+/.test(node.textContent)));
});

test("the SOP's app.js calls work from the page's origin with its one added header: trainingRequest('start', {id, approved: true}), the status poll, trainingRequest('stop')", async () => {
  const outcome = await page.evaluate(async (api) => {
    // As the SOP describes app.js (883-902): POST JSON to /api/training/<action>, poll the status; the one
    // change it needs is the page's secret, which the daemon put in the page's HTML (docs/security.md).
    const secret = { "X-Arena-Token": document.getElementById("training-room").dataset.token };
    async function trainingRequest(action, body = {}) {
      const response = await fetch(`${api}/api/training/${action}`, { method: "POST", headers: { "Content-Type": "application/json", ...secret }, body: JSON.stringify(body) });
      const json = await response.json();
      if (!response.ok) throw new Error(json.error);
      return json;
    }
    async function refreshTrainingStatus() {
      const status = await (await fetch(`${api}/api/training/status`, { headers: secret })).json();
      const last = status.logs[status.logs.length - 1];
      return { status, shown: `${status.active ? `${status.active.id} ${status.active.status}` : "idle"} | ${status.jobs.length} jobs | ${last ? last.line.slice(0, 100) : ""}` };
    }
    const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
    const result = { start: await trainingRequest("start", { id: "tiny-lm", approved: true }) };
    let polled = await refreshTrainingStatus();
    // Checkpoint-first (SOP safety rule 4): the plain stop is sent right after the run announces a
    // checkpoint newer than the one it resumed from. On a loaded machine even that one can look old
    // (7.3: older than twice the cadence): the stop is refused 409 and nothing stops; it is sent
    // again after the next fresh checkpoint.
    const resumedFrom = polled.status.active?.lastCheckpoint?.step ?? -1;
    let seen = resumedFrom;
    for (let tries = 0; tries < 1200 && !result.stop; tries++) {
      polled = await refreshTrainingStatus();
      const step = polled.status.active?.lastCheckpoint?.step ?? -1;
      if (polled.status.active?.step > 0 && step > seen) {
        seen = step;
        result.polled = polled.shown;
        try {
          result.stop = await trainingRequest("stop");
        } catch (error) {
          result.questioned = [...(result.questioned ?? []), error.message];
        }
      } else {
        await wait(100);
      }
    }
    result.after = (await refreshTrainingStatus()).shown;
    try {
      await trainingRequest("start", { id: "tiny-lm" });
    } catch (error) {
      result.refused = error.message;
    }
    return result;
  }, daemon.api);
  assert.equal(outcome.start.id, "tiny-lm");
  assert.equal(outcome.start.status, "running");
  assert.match(outcome.polled, /^tiny-lm running \| 6 jobs \| /);
  assert.equal(outcome.stop?.status, "stopped", JSON.stringify(outcome));
  for (const refused of outcome.questioned ?? []) {
    assert.match(refused, /^This run's last checkpoint is step \d+ .*; stopping it now loses .+ of training\. Stop anyway\?$/);
  }
  assert.match(outcome.after, /^idle \| 6 jobs \| /);
  assert.equal(outcome.refused, "explicit training approval required");
});

test("Run of a finished job: the panel offers Start fresh alone (no Resume that arena-ls would refuse), which trains it anew", async () => {
  await runJob("short");
  await page.click("#arena-dialog button[data-answer='Approve and run']");
  const first = await untilStatus("short to finish all its steps", (now) => now.active === null && now.lastRun?.id === "short" && now.lastRun.status === "succeeded");
  await page.waitForFunction(() => document.querySelector("button.tr-run-button[data-job='short']")?.disabled === false);
  await page.click("button.tr-run-button[data-job='short']");
  // Issue 38: the job's checkpoint is at its last step, so "Resume from step 20" is not offered (it met a 409 and a second dialog).
  await page.waitForSelector("#arena-dialog:not([hidden]) button[data-answer='Start fresh']");
  const answers = await page.$$eval("#arena-dialog button", (nodes) => nodes.map((node) => node.dataset.answer));
  assert.deepEqual(answers.filter((answer) => answer !== "Cancel"), ["Start fresh"], "only Start fresh (and Cancel)");
  const question = await page.$eval("#arena-dialog .tr-question", (node) => node.textContent);
  assert.match(question, /^Short trainer is finished: it trained all 20 steps in run \S+ \(ended .+ ago\)\. Start over from step 0\? The new run overwrites its checkpoints\./);
  assert.equal((await status()).active, null, "the question started nothing");
  await shot("8-finished-job-start-over.png");
  await page.click("#arena-dialog button[data-answer='Start fresh']");
  const again = await untilStatus("the fresh run to finish", (now) => now.active === null && now.lastRun?.id === "short" && now.lastRun.runId !== first.lastRun.runId);
  assert.equal(again.lastRun.status, "succeeded");
  assert.equal(again.lastRun.step, 20);
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-notices .tr-notice")].some((node) => /^started short \(run /.test(node.textContent)));
});

test("the seed's machine (a GPU and a battery are not here, so a stand-in daemon serves the routes): GPU memory, load and temperature, battery, a battery stop notice", async () => {
  const { readFile } = await import("node:fs/promises");
  const files = {
    "/training-room.js": [path.join(AIDE, "training-room.js"), "text/javascript"],
    "/lib/core.mjs": [path.join(AIDE, "lib", "core.mjs"), "text/javascript"],
    "/lib/room-parts.mjs": [path.join(AIDE, "lib", "room-parts.mjs"), "text/javascript"],
    "/training-room.css": [path.join(AIDE, "training-room.css"), "text/css"],
  };
  const status = {
    active: null,
    logs: [{ id: "pretrain", line: "stop requested: the machine is on battery", at: "2026-08-16T10:00:00Z", seq: 9 }],
    jobs: [{ id: "pretrain", name: "Continue pretraining", kind: "train", status: "approval-required", runnable: true, blockedBy: [], lastCheckpoint: { step: 1500, path: "E:/train/ckpt_latest.pt" } }],
    health: {
      at: "2026-08-16T10:00:00Z",
      ram: { totalMb: 16384, availableMb: 6200, percent: 62.2 },
      cpu: { percent: 35, count: 12 },
      battery: { percent: 64, pluggedIn: false },
      gpus: [{ index: 0, name: "NVIDIA GeForce GTX 1060", utilization: 97, memoryUsedMb: 4040, memoryTotalMb: 6144, temperature: 71, computeCapability: "6.1", processes: [] }],
      gpuError: null,
    },
    lastRun: { id: "pretrain", runId: "pretrain-1", status: "stopped", stoppedBy: "battery", exitCode: 0, step: 1512, totalSteps: 20000, lastCheckpoint: { step: 1512, path: "E:/train/ckpt_latest.pt" } },
  };
  const stand = http.createServer(async (req, res) => {
    if (req.url === "/") {
      res.writeHead(200, { "Content-Type": "text/html" });
      res.end('<!doctype html><link rel="stylesheet" href="/training-room.css"><main><div id="training-room" data-api=""></div></main><script type="module" src="/training-room.js"></script>');
    } else if (files[req.url]) {
      res.writeHead(200, { "Content-Type": files[req.url][1] });
      res.end(await readFile(files[req.url][0]));
    } else if (req.url === "/api/training/status") {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify(status));
    } else {
      res.writeHead(204);
      res.end();
    }
  });
  await new Promise((resolve) => stand.listen(0, "127.0.0.1", resolve));
  const other = await browser.newPage();
  try {
    await other.setViewport({ width: 1200, height: 800 });
    await other.goto(`http://127.0.0.1:${stand.address().port}/`);
    await other.waitForSelector("#arena-health li");
    const health = await other.$$eval("#arena-health li", (items) => items.map((item) => item.textContent));
    assert.ok(health.includes("GPU 0: NVIDIA GeForce GTX 1060, 97% busy, 3.9 GB / 6.0 GB, 71°C"), health.join(" / "));
    assert.ok(health.includes("Battery: 64%, on battery"));
    assert.ok(health.includes("CPU: 35% of 12 cores"));
    assert.ok(health.some((line) => /^RAM: 6\.1 GB free of 16\.0 GB/.test(line)));
    await other.waitForFunction(() => [...document.querySelectorAll("#arena-notices .tr-warning")].some((node) => /stopped because the machine went on battery \(checkpoint at step 1512\)/.test(node.textContent)));
    await other.screenshot({ path: path.join(OUT, "7-battery-stop-and-gpu-health.png"), fullPage: true });
  } finally {
    await other.close();
    stand.closeAllConnections();
    await new Promise((resolve) => stand.close(resolve));
  }
});

test("the daemon killed mid-run and started again: the page's log goes on with every line once, in order", async () => {
  await page.goto(`${daemon.ui}/`);
  await page.waitForSelector("#arena-jobs li[data-job='no-checkpoint']");
  // The fake trainer prints little besides its @arena lines: show them, so the pane holds every line of the stream.
  await page.click("#arena-show-raw");
  // The job's earlier run saved a checkpoint when it was stopped (JobInfo.lastCheckpoint, 7.1): then the
  // panel offers to resume from it (what keeps the work); without one it asks plain approval.
  const selector = "button.tr-run-button[data-job='no-checkpoint']";
  await page.waitForFunction((css) => document.querySelector(css)?.disabled === false, {}, selector);
  await page.click(selector);
  const answer = "#arena-dialog:not([hidden]) button:is([data-answer='Approve and run'], [data-answer^='Resume from step'])";
  await page.waitForSelector(answer);
  await page.click(answer);
  await page.waitForFunction(() => document.querySelectorAll("#arena-log .tr-line").length > 20);
  const seen = await page.$$eval("#arena-log .tr-line", (nodes) => nodes.length);
  const { api, ui } = daemon;
  const gone = new Promise((resolve) => daemon.child.once("exit", resolve));
  daemon.child.kill("SIGKILL");
  await gone;
  daemon = await startDemo(workspace, new URL(api).port, new URL(ui).port);
  assert.equal(daemon.api, api);
  await page.waitForFunction((count) => document.querySelectorAll("#arena-log .tr-line").length > count + 40, {}, seen);
  const stopped = await (await owned(`/api/training/stop`, { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"confirm": true}' })).json();
  assert.equal(stopped.status, "stopped");
  await page.waitForFunction(() => [...document.querySelectorAll("#arena-log .tr-line")].some((node) => /— run ended: stopped/.test(node.textContent)));
  const shown = await page.$$eval("#arena-log .tr-line[data-seq]", (nodes) => nodes.map((node) => ({ seq: Number(node.dataset.seq), text: node.textContent })));
  const whole = [];
  let since = -1;
  for (;;) {
    const page_ = await (await owned(`/api/training/logs?format=json&runId=${stopped.runId}&since=${since}`)).json();
    whole.push(...page_.lines);
    since = page_.next;
    if (page_.done) {
      break;
    }
  }
  assert.deepEqual(shown.map((row) => row.seq), whole.map((line) => line.seq), "every line once, in order, across the daemon's restart");
  assert.deepEqual(shown.map((row) => row.text), whole.map((line) => line.line));
  assert.deepEqual(whole.map((line) => line.seq), whole.map((_, index) => whole[0].seq + index), "the stream keeps every line: its seqs are contiguous");
  await page.click("#arena-show-raw");
  const readable = await page.$$eval("#arena-log .tr-line[data-seq]", (nodes) => nodes.map((node) => Number(node.dataset.seq)));
  assert.deepEqual(readable, whole.filter((line) => !isRawLine(line)).map((line) => line.seq), "unticked: the same lines less the announcements");
  assert.ok(readable.length < whole.length);
  await shot("9-log-across-a-daemon-restart.png");
});
