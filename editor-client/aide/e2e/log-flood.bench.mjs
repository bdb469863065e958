// What the Training Room's log pane costs the page while a trainer floods it: the panel mounted in
// Debian's Chromium with a stand-in EventSource, LINES lines at RATE a second, then Chromium's own
// counters (layouts, layout and main-thread seconds). Figures, no assertion (docs/performance.md).
//
//   node e2e/log-flood.bench.mjs [LINES] [RATE]      (default 3000 lines at 200 a second)
import http from "node:http";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const PANEL = path.resolve(HERE, "..");
const LINES = Number(process.argv[2] ?? 3000);
const RATE = Number(process.argv[3] ?? 200);
const TICK_MS = 100;

const PAGE = `<!doctype html><html><head><link rel="stylesheet" href="/training-room.css"></head><body>
<div id="training-room" data-autostart="false"></div>
<script type="module">
import { mountTrainingRoom } from "/training-room.js";
class StandInEventSource { constructor() { window.stream = this; this.listeners = {}; this.readyState = 1; }
  addEventListener(name, listener) { this.listeners[name] = listener; } close() {} }
const status = { jobs: [{ id: "j", name: "J", runnable: true }], active: { runId: "r1", id: "j", status: "running", step: 1, steps: 100 }, lastRun: null, health: {} };
const fetchImpl = async () => ({ ok: true, status: 200, json: async () => status });
mountTrainingRoom(document.getElementById("training-room"), { fetchImpl, EventSourceImpl: StandInEventSource, pollMs: 3600000 });
</script></body></html>`;

const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css" };
const server = http.createServer((request, response) => {
  const url = request.url.split("?")[0];
  if (url === "/") {
    response.writeHead(200, { "Content-Type": "text/html" }).end(PAGE);
    return;
  }
  const file = path.join(PANEL, path.normalize(url));
  let body;
  try {
    body = file.startsWith(PANEL + path.sep) ? readFileSync(file) : undefined;
  } catch {
    body = undefined;
  }
  if (body === undefined) {
    response.writeHead(404).end();
  } else {
    response.writeHead(200, { "Content-Type": TYPES[path.extname(file)] ?? "text/plain" }).end(body);
  }
}).listen(0, "127.0.0.1");
await new Promise((resolve) => server.once("listening", resolve));

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: false,
  args: ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1000"],
  defaultViewport: { width: 1200, height: 1000 },
});
try {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  await page.waitForFunction(() => window.stream?.listeners.line);
  const cdp = await page.createCDPSession();
  await cdp.send("Performance.enable");
  const metrics = async () => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
  const before = await metrics();
  await page.evaluate(async (lines, perTick, tickMs) => {
    for (let seq = 1; seq <= lines; ) {
      for (let i = 0; i < perTick && seq <= lines; i += 1, seq += 1) {
        const data = JSON.stringify({ line: `step ${seq} loss 1.234 lr 3e-4 tokens/s 12345`, stream: "stdout" });
        window.stream.listeners.line({ lastEventId: String(seq), data });
      }
      await new Promise((resolve) => setTimeout(resolve, tickMs));
    }
  }, LINES, Math.max(1, Math.round((RATE * TICK_MS) / 1000)), TICK_MS);
  const after = await metrics();
  const rows = await page.$$eval("#arena-log .tr-line", (nodes) => nodes.length);
  const took = (name) => (after[name] - before[name]).toFixed(2);
  console.log(`${LINES} lines at ${RATE}/s: ${rows} rows shown, ${after.LayoutCount - before.LayoutCount} layouts, ` +
    `layout ${took("LayoutDuration")} s, style ${took("RecalcStyleDuration")} s, script ${took("ScriptDuration")} s, main thread ${took("TaskDuration")} s`);
} finally {
  await browser.close();
  server.close();
}
