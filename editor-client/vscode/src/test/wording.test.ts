/**
 * The extension says what the terminal client says for the same server answer: every case of
 * tests/editor/fixtures/wording_cases.json (written by `python -m arena_ls.wording_gen --write`
 * from the Python client's own functions) against the core's functions here. AIDE bundles this
 * core (lib/core.mjs), so its words are checked by the same cases.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { keepAwakeText } from "../core/keepAwake";
import { rebootOffer } from "../core/laptop";
import type { RunInfo } from "../core/protocol";
import { TEXTS, say } from "../core/wording";
import { checkpointWords, finishedPrompt, fmtSpan, lostLine, mismatchPrompt, stopQuestion, stoppedNotice } from "../core/workLost";

interface Case {
  fn: string;
  args: unknown[];
  text: string | null;
}

const CASES_PATH = path.resolve(__dirname, "../../../../tests/editor/fixtures/wording_cases.json");
const cases = JSON.parse(readFileSync(CASES_PATH, "utf8")) as { now: string; cases: Case[] };
const NOW = new Date(cases.now);

type Data = Record<string, unknown>;

const FUNCTIONS: Readonly<Record<string, (...args: unknown[]) => string | undefined>> = {
  span: (seconds) => fmtSpan(seconds),
  checkpoint: (checkpoint) => checkpointWords(checkpoint, NOW),
  finishedPrompt: (job, run) => finishedPrompt(String(job), run, NOW),
  mismatchPrompt: (job, data) => mismatchPrompt(String(job), data as Data, NOW),
  stopPrompt: (data) => stopQuestion(data as Data, NOW),
  lostLine: (run) => lostLine(run),
  stoppedNotice: (run) => stoppedNotice(run),
  keepAwakeText: (run, reason) => keepAwakeText(run as RunInfo, typeof reason === "string" ? reason : undefined),
  rebootOffer: (run) => rebootOffer(run as RunInfo)?.message.replace(/^Arena: /, ""),
};

describe("one wording: the same words as the terminal client", () => {
  it("has a function for every kind of case, and cases of each", () => {
    const kinds = new Set(cases.cases.map((item) => item.fn));
    assert.deepEqual([...kinds].sort(), Object.keys(FUNCTIONS).sort());
  });

  for (const [index, item] of cases.cases.entries()) {
    it(`${item.fn} #${index}: ${item.text ?? "(nothing)"}`, () => {
      const said = FUNCTIONS[item.fn](...item.args);
      assert.equal(said ?? null, item.text);
    });
  }

  it("fills every placeholder and refuses a missing one", () => {
    assert.equal(say("maySleep", { reason: "no bus {x}" }), "the machine may sleep: no bus {x}");
    assert.throws(() => say("maySleep"), /maySleep needs \{reason\}/);
    assert.equal(TEXTS.stopQuestion, "Stop anyway?");
  });
});
