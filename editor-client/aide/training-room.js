// The Training Room panel for AIDE's page: plain JS, no framework, an ES module.
//
//   <div id="training-room" data-api="http://127.0.0.1:4777"></div>
//   <script type="module" src="training-room.js"></script>
//
// or `import { mountTrainingRoom } from "./training-room.js"; mountTrainingRoom(element, { api })`.
// It uses only the routes of contract 7.4 (GET /api/training/status, POST
// /api/training/start and /stop, GET /api/training/logs), so it works against
// any daemon that serves them. Log text is rendered with textContent only,
// after its ANSI escapes are stripped: a trainer's output is never markup.
import { blockedList, formatEta, formatLoss, healthLines, lostLine, percentDone, resumeOffer, stopPrompt, stoppedNotice } from "./lib/core.mjs";
import { LogPane, MAX_LOG_LINES, MAX_NOTICES, POLL_MS, el, finishedOffer, finite, fixButton, isRawLine, keepAwakeLine, keepAwakeReasonOf, lostText, measuredSpeed, offerStartBody, pageStorage, placeOf, recordText, storeShowRaw, storedShowRaw, stripAnsi, withResume } from "./lib/room-parts.mjs";

// The module's API, as before its split: the panel's words and parts live in lib/room-parts.mjs.
export { stripAnsi, placeOf, lostText, withResume, isRawLine, LogBuffer, LogPane, finishedOffer, recordText, keepAwakeLine, keepAwakeReasonOf, offerStartBody } from "./lib/room-parts.mjs";

export class TrainingRoom {
  constructor(root, { api = "", token = "", pollMs = POLL_MS, fetchImpl, EventSourceImpl, storage } = {}) {
    this.root = root;
    this.api = api.replace(/\/$/, "");
    // The daemon's secret, given to this page with its HTML (docs/security.md, "The AIDE daemon").
    this.token = /^[A-Za-z0-9_-]+$/.test(token) ? token : "";
    this.pollMs = pollMs;
    this.fetch = fetchImpl ?? ((...args) => window.fetch(...args));
    this.EventSource = EventSourceImpl ?? window.EventSource;
    this.status = null;
    this.stream = null;
    this.streamRunId = null;
    this.lastSeq = -1;
    this.lastReading = null;
    this.noticesShown = new Set();
    this.busy = false;
    this.phase = null;
    this.storage = storage === undefined ? pageStorage() : storage;
    this.showRaw = storedShowRaw(this.storage);
    /** Why each run cannot keep the machine awake, from its log (run id → reason). */
    this.awakeReasons = new Map();
    this._build();
  }

  _build() {
    this.root.classList.add("training-room");
    this.root.replaceChildren();
    this.noticeBox = el("div", { class: "tr-notices", id: "arena-notices", role: "status", "aria-live": "polite" });
    this.jobList = el("ul", { class: "tr-jobs", id: "arena-jobs" });
    this.runTitle = el("div", { class: "tr-run-title", id: "arena-run-title", text: "No run active" });
    this.bar = el("div", { class: "tr-bar-fill", id: "arena-progress-fill" });
    this.progress = el("div", { class: "tr-bar", id: "arena-progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100 }, this.bar);
    this.progressText = el("div", { class: "tr-progress-text", id: "arena-progress-text", text: "" });
    this.checkpointText = el("div", { class: "tr-checkpoint", id: "arena-checkpoint", text: "" });
    this.recordLine = el("div", { class: "tr-record", id: "arena-record", text: "" });
    this.awakeLine = el("div", { class: "tr-keep-awake", id: "arena-keep-awake", text: "" });
    this.offerBox = el("div", { class: "tr-offers", id: "arena-offers" });
    this.stopButton = el("button", { type: "button", class: "tr-stop", id: "arena-stop", disabled: true, text: "■ Stop" });
    this.stopButton.addEventListener("click", () => this.stop());
    this.log = el("div", { class: "tr-log", id: "arena-log", role: "log" });
    this.logPane = new LogPane(this.log, MAX_LOG_LINES);
    this.rawToggle = el("input", { type: "checkbox", id: "arena-show-raw", checked: this.showRaw });
    this.rawToggle.checked = this.showRaw;
    this.rawToggle.addEventListener("change", () => this.setShowRaw(this.rawToggle.checked));
    const rawLabel = el("label", { class: "tr-raw-toggle", for: "arena-show-raw", title: "also show the trainer's @arena {…} announcement lines" }, this.rawToggle, " show raw lines");
    this.healthList = el("ul", { class: "tr-health", id: "arena-health" });
    this.connection = el("span", { class: "tr-connection", id: "arena-connection", text: "connecting…" });
    this.dialog = el("div", { class: "tr-dialog", id: "arena-dialog", hidden: true });
    this.root.append(
      el("div", { class: "tr-head" }, el("h2", { text: "Training Room" }), this.connection),
      this.noticeBox,
      this.offerBox,
      el("section", { class: "tr-section" }, el("h3", { text: "Jobs" }), this.jobList),
      el(
        "section",
        { class: "tr-section tr-run", id: "training-status" },
        el("h3", { text: "Run" }),
        el("div", { class: "tr-run-head" }, this.runTitle, this.stopButton),
        this.progress,
        this.progressText,
        this.checkpointText,
        this.awakeLine,
        this.recordLine,
      ),
      el("section", { class: "tr-section" }, el("div", { class: "tr-log-head" }, el("h3", { text: "Log" }), rawLabel), this.log),
      el("section", { class: "tr-section" }, el("h3", { text: "Machine" }), this.healthList),
      this.dialog,
    );
  }

  start() {
    this.refresh();
    this.timer = setInterval(() => this.refresh(), this.pollMs);
    return this;
  }

  dispose() {
    clearInterval(this.timer);
    this.stream?.close();
  }

  async _call(path, body) {
    const token = this.token ? { "X-Arena-Token": this.token } : {};
    const options = body === undefined ? { headers: token } : { method: "POST", headers: { "Content-Type": "application/json", ...token }, body: JSON.stringify(body) };
    const response = await this.fetch(`${this.api}${path}`, options);
    const json = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
    return { status: response.status, ok: response.ok, json };
  }

  async refresh() {
    let answer;
    try {
      answer = await this._call("/api/training/status");
    } catch (error) {
      this.connection.textContent = `daemon unreachable (${error.message})`;
      this.connection.className = "tr-connection tr-bad";
      return;
    }
    if (!answer.ok) {
      this.connection.textContent = answer.json.error ?? `HTTP ${answer.status}`;
      this.connection.className = "tr-connection tr-bad";
      return;
    }
    this.connection.textContent = "connected";
    this.connection.className = "tr-connection tr-good";
    this.status = answer.json;
    this.render();
  }

  render() {
    const status = this.status;
    if (!status) {
      return;
    }
    this._renderJobs(status);
    this._renderRun(status);
    this._renderHealth(status.health);
    this._renderNotices(status);
    this._renderOffers(status);
    this.recordLine.textContent = recordText(status.active ?? status.lastRun);
    this._renderKeepAwake();
    this._follow(status);
  }

  /** Contract 8.3: each run a restart of the machine interrupted, with its "Resume from step N" button. */
  _renderOffers(status) {
    const offers = Array.isArray(status.interrupted) ? status.interrupted : [];
    const signature = JSON.stringify(offers);
    if (signature !== this.offersSignature) {
      this.offersSignature = signature;
      this.offerBox.replaceChildren(
        ...offers.map((offer) => {
          const button = el("button", { type: "button", class: "tr-resume-offer", "data-run": offer.runId, text: offer.offer });
          button.addEventListener("click", () => this.resumeInterrupted(offer));
          return el("div", { class: "tr-notice tr-warning tr-offer", "data-run": offer.runId }, el("span", { text: offer.message }), button);
        }),
      );
    }
    const activeNow = status.active !== null && status.active !== undefined;
    for (const button of this.offerBox.querySelectorAll("button.tr-resume-offer")) {
      button.disabled = activeNow || this.busy;
    }
  }

  async resumeInterrupted(offer) {
    if (this.busy) {
      return;
    }
    this.busy = true;
    try {
      const answer = await this._call("/api/training/start", offerStartBody(offer));
      if (!answer.ok) {
        this._notice(`offer-refused:${offer.runId}:${Date.now()}`, "error", `${offer.id}: ${answer.json.error ?? `HTTP ${answer.status}`}`);
      }
    } finally {
      this.busy = false;
      await this.refresh();
    }
  }

  /** Rebuilds the job list only when the jobs change (a click is never lost to a poll); the buttons follow every render. */
  _renderJobs(status) {
    const activeNow = status.active !== null && status.active !== undefined;
    const signature = JSON.stringify([status.jobs, status.workspace]);
    if (signature !== this.jobsSignature) {
      this.jobsSignature = signature;
      this._buildJobs(status);
    }
    for (const button of this.jobList.querySelectorAll("button.tr-run-button")) {
      const job = (status.jobs ?? []).find((candidate) => candidate.id === button.dataset.job);
      const blocked = job?.runnable !== true;
      button.disabled = blocked || activeNow || this.busy;
      button.title = blocked ? "blocked: see the reasons below" : activeNow ? "another run is active" : `start ${button.dataset.job}`;
    }
  }

  _buildJobs(status) {
    const workspace = status.workspace ?? null;
    this.jobList.replaceChildren(
      ...(status.jobs ?? []).map((job) => {
        const run = el("button", { type: "button", class: "tr-run-button", "data-job": job.id, text: "▶ Run" });
        const blocked = job.runnable !== true;
        run.addEventListener("click", () => this.run(job));
        const meta = [job.kind ?? "task", job.status ?? ""].filter(Boolean).join(" · ");
        const item = el(
          "li",
          { class: blocked ? "tr-job tr-blocked" : "tr-job", "data-job": job.id },
          el("div", { class: "tr-job-head" }, el("span", { class: "tr-job-name", text: job.name ?? job.id }), el("span", { class: "tr-job-meta", text: `${job.id} · ${meta}` }), run),
        );
        if (job.lastCheckpoint && finite(job.lastCheckpoint.step)) {
          item.append(el("div", { class: "tr-job-ckpt", text: `last checkpoint: step ${job.lastCheckpoint.step}${job.lastCheckpoint.path ? ` (${job.lastCheckpoint.path})` : ""}` }));
        }
        if (blocked) {
          const reasons = (job.blockedBy ?? []).length > 0
            ? job.blockedBy.map((diagnostic) => el("li", { class: "tr-reason" }, el("code", { text: diagnostic.code ?? "" }), ` ${diagnostic.message ?? ""} `, el("span", { class: "tr-place", text: placeOf(diagnostic, workspace) })))
            : blockedList(job).map((reason) => el("li", { class: "tr-reason", text: reason }));
          item.append(el("div", { class: "tr-why", text: "Cannot run:" }), el("ul", { class: "tr-reasons" }, ...reasons));
          if ((job.blockedBy ?? []).length > 0) {
            item.append(this._fixesRow(job));
          }
        }
        return item;
      }),
    );
  }

  /**
   * The quick fixes arena-ls offers for a blocked job's findings (issue 35, item 5: "Add
   * arena-ls's callback", "Add the trainer kit beside this script", the resume fixes...), one
   * button each under "Cannot run"; filled when the daemon answers (the list is rebuilt, and asked
   * again, only when the job's findings change).
   */
  _fixesRow(job) {
    const row = el("div", { class: "tr-fixes", "data-job": job.id });
    this._call(`/api/training/fixes?id=${encodeURIComponent(job.id)}`)
      .then((answer) => {
        const fixes = answer.ok ? answer.json.fixes ?? [] : [];
        row.replaceChildren(...fixes.map((fix) => fixButton(job, fix, () => this.applyFix(job, fix))));
      })
      .catch(() => {});
    return row;
  }

  /** Applies one fix after the person says so (it edits the trainer on disk), then shows what changed. */
  async applyFix(job, fix) {
    const name = job.name ?? job.id;
    const choice = await this.ask(`Apply "${fix.title}" to the trainer of ${name}? It edits the file on disk.`, ["Apply"]);
    if (choice !== "Apply") {
      return;
    }
    const key = `fix:${job.id}:${fix.title}:${Date.now()}`;
    try {
      const answer = await this._call("/api/training/fix", { id: job.id, title: fix.title });
      if (answer.ok) {
        const applied = [].concat(answer.json.applied ?? fix.title).join(" and ");
        this._notice(key, "info", `${name}: ${applied} (${(answer.json.files ?? []).join(", ")})`);
      } else {
        this._notice(key, "error", `${name}: ${answer.json.error ?? `HTTP ${answer.status}`}`);
      }
    } catch (error) {
      this._notice(key, "error", `${name}: ${error.message}`);
    }
    await this.refresh();
  }

  _renderRun(status) {
    const active = status.active;
    const now = Date.now();
    if (!active) {
      const last = status.lastRun;
      this.runTitle.textContent = last ? `No run active · last: ${last.id} ${last.status}` : "No run active";
      this.stopButton.disabled = true;
      if (!last) {
        this.bar.style.width = "0%";
        this.progressText.textContent = "";
        this.checkpointText.textContent = "";
      } else {
        const percent = percentDone(last);
        this.bar.style.width = `${percent ?? 0}%`;
        this.progressText.textContent = finite(last.step)
          ? `${last.status} at step ${last.step}${finite(last.totalSteps) ? `/${last.totalSteps}` : ""}${percent !== undefined ? ` (${percent}%)` : ""}`
          : last.status;
        this.checkpointText.textContent = withResume(last.lastCheckpoint ? `checkpoint: step ${last.lastCheckpoint.step} (${last.lastCheckpoint.path})` : "no checkpoint", last);
      }
      this.lastReading = null;
      return;
    }
    this.runTitle.textContent = `${active.name ?? active.id} · ${this.phase ?? active.status}${active.stalled ? " · stalled" : ""}`;
    this.stopButton.disabled = this.busy || active.status === "stopping";
    const percent = percentDone(active);
    this.bar.style.width = `${percent ?? 0}%`;
    this.progress.setAttribute("aria-valuenow", String(percent ?? 0));
    const speed = finite(active.stepsPerSecond) ? active.stepsPerSecond : measuredSpeed(this.lastReading, active, now);
    if (finite(active.step)) {
      this.lastReading = { runId: active.runId, step: active.step, at: now };
    }
    const parts = [];
    parts.push(finite(active.step) ? `step ${active.step}${finite(active.totalSteps) ? `/${active.totalSteps}` : ""}${percent !== undefined ? ` (${percent}%)` : ""}` : "waiting for the first step");
    const loss = formatLoss(active.loss);
    if (loss !== undefined) {
      parts.push(`loss ${loss}`);
    }
    if (speed !== undefined) {
      parts.push(`${speed.toFixed(1)} it/s`);
    }
    const eta = formatEta(active.etaSeconds);
    if (eta !== undefined) {
      parts.push(`ETA ${eta}`);
    }
    this.progressText.textContent = parts.join(" · ");
    this.checkpointText.textContent = withResume(active.lastCheckpoint ? `last checkpoint: step ${active.lastCheckpoint.step} (${active.lastCheckpoint.path})` : "no checkpoint yet", active);
  }

  _renderHealth(health) {
    const lines = healthLines(health);
    this.healthList.replaceChildren(...lines.map((line) => el("li", { text: line })));
  }

  _notice(key, kind, text) {
    if (this.noticesShown.has(key)) {
      return;
    }
    this.noticesShown.add(key);
    const close = el("button", { type: "button", class: "tr-notice-close", "aria-label": "dismiss", text: "×" });
    const notice = el("div", { class: `tr-notice tr-${kind}`, "data-key": key }, el("span", { text }), close);
    close.addEventListener("click", () => notice.remove());
    this.noticeBox.prepend(notice);
    while (this.noticeBox.childElementCount > MAX_NOTICES) {
      this.noticeBox.lastElementChild.remove();
    }
  }

  _renderNotices(status) {
    const last = status.lastRun;
    if (last && last.status === "crashed") {
      const failure = last.failure ? `${last.failure.kind}${last.failure.evidence ? `: ${stripAnsi(last.failure.evidence)}` : ""}` : "";
      this._notice(`crash:${last.runId}`, "error", `${last.id} crashed (exit code ${last.exitCode ?? "?"})${failure ? ` — ${failure}` : ""}${last.lastCheckpoint ? `; last checkpoint at step ${last.lastCheckpoint.step}` : ""}`);
    }
    if (last && last.stoppedBy === "battery") {
      this._notice(`battery:${last.runId}`, "warning", `${last.id} was stopped because the machine went on battery (checkpoint at step ${last.lastCheckpoint?.step ?? "?"}); it is started again from there when power returns, unless the setting power.resumeOnAc is off.`);
    }
    const active = status.active;
    if (active && active.status === "restarting") {
      const waiting = Array.isArray(active.waitingFor) && active.waitingFor.length > 0 ? `, waiting for: ${active.waitingFor.map((check) => check.message ?? check.name).join("; ")}` : "";
      this._notice(`restart:${active.runId}:${active.restarts}`, "warning", `${active.id} crashed and is being restarted from its last checkpoint${waiting}`);
    }
  }

  /** Follows the log of the active run (else the newest) with EventSource; the browser resumes with Last-Event-ID. */
  _follow(status) {
    const runId = status.active?.runId ?? status.lastRun?.runId ?? null;
    if (!runId) {
      return;
    }
    if (runId === this.streamRunId) {
      // EventSource gives up for good on an answer that is not 200 or 204 (a 503 while arena-ls restarts):
      // open it again after the last line shown, until the run's `end` has come.
      if (this.stream && this.stream.readyState === 2 && !this.streamEnded && status.active?.runId === runId) {
        this._open(runId, this.lastSeq);
      }
      return;
    }
    this.stream?.close();
    this.streamRunId = runId;
    this.lastSeq = -1;
    this.logPane.clear();
    this._open(runId, -1);
  }

  _open(runId, since) {
    this.streamEnded = false;
    // An EventSource cannot send a header: the secret goes in the query (GET only).
    const query = `${since >= 0 ? `&since=${since}` : ""}${this.token ? `&token=${encodeURIComponent(this.token)}` : ""}`;
    const source = new this.EventSource(`${this.api}/api/training/logs?runId=${encodeURIComponent(runId)}${query}`);
    this.stream = source;
    source.addEventListener("line", (event) => {
      const seq = Number(event.lastEventId);
      if (Number.isFinite(seq) && seq <= this.lastSeq) {
        return;
      }
      this.lastSeq = seq;
      let data;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      this._appendLog({ ...data, seq });
    });
    source.addEventListener("end", (event) => {
      this.streamEnded = true;
      source.close();
      let final = null;
      try {
        final = JSON.parse(event.data);
      } catch {
        // the end is the end
      }
      if (final?.status) {
        this._appendLog({ line: `— run ended: ${final.status}${finite(final.exitCode) ? ` (exit code ${final.exitCode})` : ""}`, stream: "end" });
      }
      this.refresh();
    });
  }

  _renderKeepAwake() {
    const active = this.status?.active;
    this.awakeLine.textContent = keepAwakeLine(active, active ? this.awakeReasons.get(active.runId) : undefined);
  }

  _appendLog(data) {
    const reason = this.streamRunId && !this.awakeReasons.has(this.streamRunId) ? keepAwakeReasonOf(data) : undefined;
    if (reason !== undefined) {
      this.awakeReasons.set(this.streamRunId, reason);
      this._renderKeepAwake();
    }
    const stderr = data.stream === "stderr";
    const text = stripAnsi(stderr ? String(data.line).replace(/^stderr: /, "") : data.line);
    const row = el("div", { class: `tr-line tr-${data.stream ?? "stdout"}`, "data-seq": data.seq });
    if (stderr) {
      row.append(el("span", { class: "tr-mark", text: "stderr" }));
    }
    row.append(document.createTextNode(text));
    const raw = isRawLine(data);
    if (raw) {
      row.classList.add("tr-raw");
    }
    this.logPane.add(row, raw, this.showRaw);
  }

  /** Shows or hides the trainer's `@arena` lines (the checkbox), and remembers the choice. */
  setShowRaw(value) {
    this.showRaw = Boolean(value);
    this.rawToggle.checked = this.showRaw;
    storeShowRaw(this.storage, this.showRaw);
    this.logPane.showAll(this.showRaw);
  }

  /** A question in the page (no native dialog): resolves to the label clicked, or undefined. */
  ask(message, labels) {
    return new Promise((resolve) => {
      const buttons = [...labels, "Cancel"].map((label, index) =>
        el("button", { type: "button", class: index === 0 ? "tr-primary" : "", "data-answer": label, text: label }),
      );
      this.dialog.replaceChildren(el("p", { class: "tr-question", text: message }), el("div", { class: "tr-answers" }, ...buttons));
      this.dialog.hidden = false;
      for (const button of buttons) {
        button.addEventListener("click", () => {
          this.dialog.hidden = true;
          this.dialog.replaceChildren();
          resolve(button.dataset.answer === "Cancel" ? undefined : button.dataset.answer);
        });
      }
      buttons[0].focus();
    });
  }

  async run(job) {
    const name = job.name ?? job.id;
    // The job's own last checkpoint (7.1) stands in for the runs the core's resume decision reads.
    // The daemon says when the job's last run trained all its steps (`finished`, `totalSteps`): then the
    // offer is "Start fresh" alone, never a "Resume" that arena-ls refuses with 1012.
    const runs = job.lastCheckpoint ? [{ jobId: job.id, lastCheckpoint: job.lastCheckpoint, totalSteps: job.lastCheckpoint.totalSteps }] : [];
    const offer = job.kind === "train" && job.finished === true ? finishedOffer(job) : resumeOffer(job, runs);
    let body;
    if (offer) {
      const labels = offer.finished ? [offer.freshLabel] : offer.labels;
      const answer = await this.ask(`${offer.prompt}\nTraining runs on this machine; starting it is your approval.`, labels);
      if (answer === undefined) {
        return;
      }
      body = answer === offer.freshLabel ? { id: job.id, approved: true, resume: false } : { id: job.id, approved: true, resume: true, startStep: offer.step };
    } else {
      const answer = await this.ask(`Run ${name}? It starts ${job.kind === "train" ? "training" : "a task"} on this machine and needs your approval.`, ["Approve and run"]);
      if (answer === undefined) {
        return;
      }
      body = { id: job.id, approved: true };
    }
    await this._act(() => this._start(body), (json) => `started ${json.id} (run ${json.runId}, pid ${json.pid ?? "?"})`, `cannot start ${job.id}`);
  }

  /**
   * POST /api/training/start; a refusal that a person can overrule (7.1) asks first:
   * 1012 already-finished offers "Start over from step 0" (`fresh: true`), 1011
   * checkpoint-mismatch offers the step asked for (`confirm: true`). null when they cancel.
   */
  async _start(body) {
    const answer = await this._call("/api/training/start", body);
    if (answer.status !== 409) {
      return answer;
    }
    const { reason, question, asked } = answer.json;
    if (reason === "already-finished" && body.resume !== false) {
      const { startStep: _dropped, resume: _resume, ...rest } = body;
      const choice = await this.ask(question ?? answer.json.error, ["Start over from step 0"]);
      return choice === undefined ? null : this._call("/api/training/start", { ...rest, fresh: true });
    }
    if (reason === "checkpoint-mismatch" && body.confirm !== true) {
      const choice = await this.ask(question ?? answer.json.error, [`Start at step ${asked ?? body.startStep ?? "?"}`]);
      return choice === undefined ? null : this._call("/api/training/start", { ...body, confirm: true });
    }
    return answer;
  }

  async stop() {
    const active = this.status?.active;
    if (!active) {
      return;
    }
    await this._act(
      async () => {
        const stopping = async (body) => {
          this.phase = "stopping: the trainer saves a checkpoint, then exits…";
          this.render();
          try {
            return await this._call("/api/training/stop", body);
          } finally {
            this.phase = null;
            this.render();
          }
        };
        let answer = await stopping({});
        if (answer.status === 409 && answer.json.reason === "no-checkpoint") {
          const choice = await this.ask(answer.json.error ?? stopPrompt(answer.json.runtimeSeconds), ["Stop anyway"]);
          if (choice === undefined) {
            return null;
          }
          answer = await stopping({ confirm: true });
        }
        return answer;
      },
      (json) => {
        if (json.status === "idle") {
          return "nothing was running";
        }
        const exit = `exit code ${json.exitCode ?? "?"}, by ${json.stoppedBy ?? "?"}`;
        if (lostLine(json) !== undefined) {
          return `${stoppedNotice({ ...json, jobId: json.id })} (${exit})`; // every client's words
        }
        const checkpoint = json.lastCheckpoint ? `checkpoint at step ${json.lastCheckpoint.step}` : "no checkpoint";
        return `${json.id} ${json.status} at step ${json.step ?? "?"} (${checkpoint}; ${lostText(json.lost, json.step, json.lastCheckpoint?.step)}; exit code ${json.exitCode ?? "?"}, by ${json.stoppedBy ?? "?"})`;
      },
      "cannot stop the run",
    );
  }

  async _act(action, success, failure) {
    this.busy = true;
    this.render();
    try {
      const answer = await action();
      if (answer === null) {
        return;
      }
      if (answer.ok) {
        this._notice(`ok:${Date.now()}:${Math.random()}`, "info", success(answer.json));
      } else {
        this._notice(`error:${Date.now()}:${Math.random()}`, "error", `${failure}: ${answer.json.error ?? `HTTP ${answer.status}`}`);
      }
    } catch (error) {
      this._notice(`error:${Date.now()}`, "error", `${failure}: ${error.message}`);
    } finally {
      this.busy = false;
      await this.refresh();
    }
  }
}

export function mountTrainingRoom(root, options = {}) {
  return new TrainingRoom(root, { api: options.api ?? root.dataset.api ?? "", token: options.token ?? root.dataset.token ?? "", ...options }).start();
}

if (typeof document !== "undefined") {
  const root = document.getElementById("training-room");
  if (root && root.dataset.autostart !== "false") {
    window.trainingRoom = mountTrainingRoom(root);
  }
}
