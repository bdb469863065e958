// The daemon's log followers, one per run, bounded (issue 39: a web page made
// thousands of followers that polled arena-ls forever).
//
// - one follower per run, shared by every reader (SSE streams and JSON pages);
// - at most `max` at once: a new one lets the oldest idle one go, and when
//   every one is being read the new one is refused (FollowersFull);
// - a follower goes when its last reader leaves and its run is known to have
//   ended; the `kept` newest finished logs stay for a page that reads them again.
/** How many runs' logs are followed at once, at most. */
export const MAX_FOLLOWERS = 16;
/** Finished logs kept (read to their end, idle) for a page that reads them again. */
export const FOLLOWERS_KEPT = 4;

export class FollowersFull extends Error {
  constructor(max) {
    super(`${max} runs' logs are being read already; close a log view and try again`);
    this.name = "FollowersFull";
  }
}

/** A Map of runId → LogFollower, oldest use first, that never grows past `max`. */
export class RunFollowers extends Map {
  /**
   * @param options.make     runId → a new LogFollower
   * @param options.isLive   runId → true while the run is known to be live (its follower is kept)
   * @param options.isKnown  runId → true when arena-ls listed the run
   */
  constructor({ make, isLive, isKnown, max = MAX_FOLLOWERS, kept = FOLLOWERS_KEPT }) {
    super();
    this.make = make;
    this.isLive = isLive;
    this.isKnown = isKnown;
    this.max = max;
    this.kept = kept;
  }

  /** The run's follower, made on first use (FollowersFull when `max` are all being read). */
  follow(runId) {
    let follower = this.get(runId);
    if (follower) {
      // Most recently used last: eviction takes the oldest first.
      this.delete(runId);
      this.set(runId, follower);
      return follower;
    }
    if (this.size >= this.max && !this.evictIdle(this.max - 1)) {
      throw new FollowersFull(this.max);
    }
    follower = this.make(runId);
    this.set(runId, follower);
    this.evictIdle(this.kept, (old) => old.done);
    return follower;
  }

  /** Lets idle followers of runs not live go, oldest first, until `keep` are left; true when that many are left. */
  evictIdle(keep, only = () => true) {
    for (const [runId, old] of this) {
      if (this.size <= keep) {
        break;
      }
      if (old.subscribers === 0 && !this.isLive(runId) && only(old)) {
        old.close();
        this.delete(runId);
      }
    }
    return this.size <= keep;
  }

  /**
   * A reader left, or the run ended: the follower goes once no one reads it
   * and its run is not live, unless it is among the `kept` finished logs.
   */
  release(runId) {
    const follower = this.get(runId);
    if (!follower || follower.subscribers > 0 || this.isLive(runId)) {
      return;
    }
    if (!follower.done && this.isKnown(runId)) {
      // The run ended but its log is not read to the end yet: the follower ends itself when it is.
      follower.whenDone().then(() => this.evictIdle(this.kept, (old) => old.done));
      return;
    }
    this.evictIdle(this.kept, (old) => old.done || !this.isKnown(old.runId));
  }

  closeAll() {
    for (const follower of this.values()) {
      follower.close();
    }
  }
}

