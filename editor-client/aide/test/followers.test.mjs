// The follower registry alone (lib/run-followers.mjs), with stand-in followers:
// one per run, never more than the cap, and let go when no one reads a run
// known to have ended.
import { test } from "node:test";
import assert from "node:assert/strict";
import { FollowersFull, RunFollowers } from "../lib/run-followers.mjs";

class StandIn {
  constructor(runId) {
    this.runId = runId;
    this.subscribers = 0;
    this.done = false;
    this.closed = false;
    this._done = [];
  }
  close() {
    this.closed = true;
  }
  finish() {
    this.done = true;
    for (const resolve of this._done.splice(0)) {
      resolve();
    }
  }
  whenDone() {
    return this.done ? Promise.resolve() : new Promise((resolve) => this._done.push(resolve));
  }
}

function registry({ live = new Set(), known = new Set(), max = 4, kept = 1 } = {}) {
  const made = [];
  const followers = new RunFollowers({
    make: (runId) => {
      const follower = new StandIn(runId);
      made.push(follower);
      return follower;
    },
    isLive: (runId) => live.has(runId),
    isKnown: (runId) => known.has(runId),
    max,
    kept,
  });
  return { followers, made, live, known };
}

test("one follower per run, however many readers ask", () => {
  const { followers, made } = registry();
  assert.equal(followers.follow("a"), followers.follow("a"));
  assert.equal(made.length, 1);
});

test("never more than the cap: idle ones of ended runs go, oldest first; live or read ones stay; past that FollowersFull", () => {
  const { followers, made, live } = registry({ max: 3, kept: 3 });
  live.add("live");
  followers.follow("live");
  followers.follow("read").subscribers = 1;
  followers.follow("idle-old");
  followers.follow("idle-new");
  assert.equal(followers.size, 3);
  assert.equal(made.find((f) => f.runId === "idle-old").closed, true, "the oldest idle one went");
  assert.deepEqual([...followers.keys()].sort(), ["idle-new", "live", "read"]);
  followers.get("idle-new").subscribers = 1;
  assert.throws(() => followers.follow("one-more"), FollowersFull);
  assert.equal(followers.size, 3);
});

test("the last reader of an ended run's log leaving lets its follower go once it is read out", async () => {
  const { followers, known, live } = registry({ kept: 0 });
  known.add("r");
  live.add("r");
  const follower = followers.follow("r");
  follower.subscribers = 1;
  live.delete("r"); // the run ended
  followers.release("r");
  assert.equal(followers.has("r"), true, "a reader still reads it");
  follower.subscribers = 0;
  followers.release("r");
  assert.equal(followers.has("r"), true, "not read to its end yet");
  follower.finish();
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(followers.has("r"), false, "read out, ended, unread: gone");
  assert.equal(follower.closed, true);
});

test("a live run's follower stays with no reader; a follower of a run arena-ls does not list goes at once", () => {
  const { followers, live } = registry({ kept: 0 });
  live.add("live");
  followers.follow("live");
  followers.release("live");
  assert.equal(followers.has("live"), true);
  followers.follow("ghost");
  followers.release("ghost");
  assert.equal(followers.has("ghost"), false);
});

test("the newest finished logs are kept (kept), older ones go", () => {
  const { followers, known } = registry({ kept: 2, max: 10 });
  for (const runId of ["a", "b", "c"]) {
    known.add(runId);
    followers.follow(runId).finish();
    followers.release(runId);
  }
  assert.deepEqual([...followers.keys()], ["b", "c"]);
});
