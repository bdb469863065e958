-- Checks of arena.nvim that need Neovim but no server: the plugin loads, its
-- commands exist, and the pure functions (statusline, refusal texts, status
-- window lines, root detection) give the expected text. Driven by
-- tests/editor/test_nvim.py, which reads the JSON written to $ARENA_UNIT_RESULTS.

local results = { checks = {} }

local function save()
  vim.fn.writefile({ vim.json.encode(results) }, os.getenv("ARENA_UNIT_RESULTS"))
end

local function expect(name, actual, expected)
  table.insert(results.checks, { name = name, ok = actual == expected, actual = actual, expected = expected })
end

local function session()
  vim.opt.runtimepath:prepend(os.getenv("ARENA_PLUGIN_DIR"))
  vim.cmd("runtime plugin/arena.lua")
  for _, command in ipairs({ "ArenaRun", "ArenaStop", "ArenaStatus", "ArenaLogs", "ArenaProbe", "ArenaResumeInterrupted", "ArenaAddToManifest" }) do
    expect("command " .. command .. " exists", vim.fn.exists(":" .. command), 2)
  end
  local arena = require("arena")
  local adopt = require("arena.adopt")
  local modern = adopt.add_to_manifest_options(true)
  expect("add to manifest asks for its source action alone", modern.context.only[1], "source.arena.addToManifest")
  expect("add to manifest applies the one action offered", modern.apply, true)
  expect("add to manifest on Neovim 0.7: the context itself", adopt.add_to_manifest_options(false).only[1], "source.arena.addToManifest")

  local running = {
    runId = "r1",
    jobId = "tiny-lm",
    status = "running",
    step = 900,
    totalSteps = 2000,
    loss = 2.3104,
    etaSeconds = 190,
  }
  expect("statusline of a running run", arena.format_run(running), "⟳ tiny-lm 45% loss 2.31 ETA 3m")
  expect("statusline before any run", arena.statusline(), "")
  arena.state.run = running
  expect("statusline() reads the shown run", arena.statusline(), "⟳ tiny-lm 45% loss 2.31 ETA 3m")
  expect("statusline through v:lua", vim.api.nvim_eval("v:lua.require'arena'.statusline()"), "⟳ tiny-lm 45% loss 2.31 ETA 3m")
  expect(
    "nulls as missing keys (Neovim 0.7)",
    arena.format_run({ runId = "r", jobId = "tiny-lm", status = "starting" }),
    "⟳ tiny-lm starting"
  )
  expect(
    "nulls as vim.NIL (later Neovims)",
    arena.format_run({ runId = "r", jobId = "t", status = "running", step = 7, totalSteps = vim.NIL, loss = vim.NIL }),
    "⟳ t step 7"
  )
  expect(
    "a stopped run has no ETA",
    arena.format_run({ runId = "r", jobId = "tiny-lm", status = "stopped", step = 900, totalSteps = 2000, loss = 2.31, etaSeconds = 5 }),
    "■ tiny-lm stopped 45% loss 2.31"
  )
  expect(
    "a cluster run says where it runs",
    arena.format_run({ runId = "r", jobId = "tiny-lm", status = "running", step = 7, cluster = { name = "lab", kind = "ray" } }),
    "⟳ tiny-lm @ lab step 7"
  )
  expect(
    "a local run's null cluster (vim.NIL)",
    arena.format_run({ runId = "r", jobId = "tiny-lm", status = "running", step = 7, cluster = vim.NIL }),
    "⟳ tiny-lm step 7"
  )
  expect(
    "a stalled run with a NaN loss",
    arena.format_run({ runId = "r", jobId = "x", status = "running", loss = 0 / 0, stalled = true }),
    "⟳ x loss nan stalled"
  )
  -- Run insights (contract section 6.3): the statusline names the first warning and counts the rest.
  local spike = {
    kind = "loss-spike",
    severity = "warning",
    message = "the loss jumped to 9.1 (median 2.3): lower the learning rate",
    since = "2026-11-30T20:14:21.461Z",
  }
  local edited = { kind = "edited-during-run", severity = "info", message = "train.py changed after launch", since = vim.NIL }
  local overdue = { kind = "checkpoint-overdue", severity = "warning", message = "no checkpoint for 400 steps" }
  local with_insights = vim.tbl_extend("force", running, { insights = { edited, spike, overdue } })
  expect("statusline with insights", arena.format_run(with_insights), "⟳ tiny-lm 45% loss 2.31 ETA 3m ⚠ loss-spike +2")
  expect(
    "statusline with one warning insight",
    arena.format_run(vim.tbl_extend("force", running, { insights = { spike } })),
    "⟳ tiny-lm 45% loss 2.31 ETA 3m ⚠ loss-spike"
  )
  expect(
    "statusline with an information only",
    arena.format_run(vim.tbl_extend("force", running, { insights = { edited } })),
    "⟳ tiny-lm 45% loss 2.31 ETA 3m ℹ edited-during-run"
  )
  expect("statusline with insights = {} or vim.NIL", arena.format_run(vim.tbl_extend("force", running, { insights = vim.NIL })), "⟳ tiny-lm 45% loss 2.31 ETA 3m")
  arena.state.run = with_insights
  expect("statusline() shows the shown run's insights", arena.statusline(), "⟳ tiny-lm 45% loss 2.31 ETA 3m ⚠ loss-spike +2")
  arena.state.run = running
  expect(
    "insight lines say what to do",
    table.concat(arena.insight_lines(with_insights), "\n"),
    "ℹ edited-during-run: train.py changed after launch\n"
      .. "⚠ loss-spike (since 20:14:21 UTC): the loss jumped to 9.1 (median 2.3): lower the learning rate\n"
      .. "⚠ checkpoint-overdue: no checkpoint for 400 steps"
  )

  -- The VRAM probe: JobInfo.probe in a few words, its verdict, and the 1010 question.
  local failed = { ok = false, peakVramMb = 6000, at = "2026-11-30T20:10:00Z", message = "peak 6000 MB is above the 5120 MB limit" }
  expect("probe passed", arena.probe_text({ ok = true, peakVramMb = 3000, at = "x" }), "probe passed (3000 MB)")
  expect("probe failed", arena.probe_text(failed), "probe failed (6000 MB)")
  expect("probe failed without a GPU", arena.probe_text({ ok = false, peakVramMb = vim.NIL, message = "no GPU" }), "probe failed")
  expect("never probed", arena.probe_text(vim.NIL), nil)
  expect("probe verdict message", arena.verdict_message("lm", failed), "lm probe failed (6000 MB): peak 6000 MB is above the 5120 MB limit")
  expect(
    "1010 asks to run the probe, saying why",
    arena.probe_prompt("lm", { code = 1010, message = "needs a probe", data = { reason = "probe-required", probe = failed } }),
    "lm needs a passing VRAM probe before it runs (its last probe failed: peak 6000 MB is above the 5120 MB limit). Run the probe now? [y/N] "
  )
  expect(
    "1010 without any probe yet",
    arena.probe_prompt("lm", { code = 1010, message = "needs a probe", data = { probe = vim.NIL } }),
    "lm needs a passing VRAM probe before it runs (no probe of its current trainer). Run the probe now? [y/N] "
  )
  expect(
    "refusal reason of 1010 from its code",
    arena.refusal_message("probe lm", { code = 1010, message = "needs a probe" }),
    "cannot probe lm (probe-required): needs a probe"
  )

  expect("ETA in hours", arena.format_eta(3900), "1h05m")
  expect("ETA in seconds", arena.format_eta(44.6), "45s")
  expect("a logged stderr chunk decoded", arena.unquote('"a\\nb\\"c\\\\d\\065"'), 'a\nb"c\\dA')
  expect("single-quoted chunk decoded", arena.unquote("'say \"hi\"\\t!'"), 'say "hi"\t!')
  expect(
    "exit message with the server's last stderr lines",
    arena.exit_message(1, 0, { "Traceback (most recent call last):", "ModuleNotFoundError: No module named 'arena_ls'" }),
    "arena-ls exited with code 1 (signal 0). Its last lines on stderr:\n  Traceback (most recent call last):\n  ModuleNotFoundError: No module named 'arena_ls'"
  )
  expect("exit message without stderr", arena.exit_message(1, 0, {}), "arena-ls exited with code 1 (signal 0); see :LspLog")

  expect("log line from stderr", arena.format_log_line({ seq = 1, stream = "stderr", text = "oops" }), "[stderr] oops")
  expect("log line from the supervisor", arena.format_log_line({ seq = 2, stream = "arena", text = "restarting" }), "[arena] restarting")
  expect("log line from stdout", arena.format_log_line({ seq = 3, stream = "stdout", text = "step 1" }), "step 1")

  expect(
    "stop prompt counts minutes",
    arena.stop_prompt(612),
    "This run has no checkpoint yet; stopping it now loses 10 min of training. Stop anyway? [y/N] "
  )
  expect(
    "stop prompt of a young run says its seconds, not a rounded-up minute",
    arena.stop_prompt(3),
    "This run has no checkpoint yet; stopping it now loses 3 s of training. Stop anyway? [y/N] "
  )
  expect(
    "refusal with its reason and details",
    arena.refusal_message("start tiny-lm", {
      code = 1004,
      message = "gates failed",
      data = { reason = "gates-failed", diagnostics = { { code = "AR004", message = "no checkpoint save" } } },
    }),
    "cannot start tiny-lm (gates-failed): AR004 no checkpoint save"
  )
  expect(
    "refusal reason from the code alone",
    arena.refusal_message("start x", { code = 1003, message = "busy", data = { active = { jobId = "y", status = "running" } } }),
    "cannot start x (already-running): y is running; one run at a time"
  )
  expect(
    "pre-flight refusal lists the failing checks",
    arena.refusal_message("start x", {
      code = 1005,
      message = "pre-flight",
      data = { checks = { { name = "ram", ok = false, message = "1 GB free" }, { name = "disk", ok = true, message = "" } } },
    }),
    "cannot start x (preflight-failed): ram: 1 GB free"
  )

  local lines = arena.status_lines({
    active = running,
    runs = { running },
    jobs = {
      { id = "tiny-lm", kind = "train", status = "ready", runnable = true, blockedBy = {} },
      { id = "broken", kind = "train", status = "ready", runnable = false, blockedBy = { { code = "AR004", message = "no save" } } },
      { id = "lm", kind = "train", status = "ready", runnable = true, blockedBy = {}, probe = failed },
    },
    health = {
      ram = { totalMb = 16000, availableMb = 12000, percent = 25 },
      cpu = { percent = 12.5, count = 2 },
      gpus = { { index = 0, name = "H200", utilization = 97, memoryUsedMb = 2048, memoryTotalMb = 143771, temperature = 41 } },
    },
  })
  local text = table.concat(lines, "\n")
  expect("status: active run", lines[1], "Active run: ⟳ tiny-lm 45% loss 2.31 ETA 3m")
  expect("status: blocked job", text:find("  ⊘ broken (train) blocked:\n      AR004: no save\n", 1, true) ~= nil, true)
  expect("status: a job's probe", text:find("  ▶ lm (train) ready · probe failed (6000 MB)\n", 1, true) ~= nil, true)
  expect("status: a job never probed", text:find("  ▶ tiny-lm (train) ready\n", 1, true) ~= nil, true)
  expect("status: no cluster line without clusters", text:find("Cluster", 1, true), nil)
  local cluster_lines = arena.health_lines({
    gpus = {},
    clusters = {
      { name = "lab", nodes = 1, cpus = 2, gpus = 0, gpuNames = {}, error = vim.NIL },
      { name = "big", nodes = 3, cpus = 96, gpus = 1, gpuNames = { "A100" } },
      { name = "down", nodes = vim.NIL, error = "cluster 'down' is not reachable (Connection refused)" },
      { name = "new", nodes = vim.NIL, at = vim.NIL },
    },
  })
  expect("health: a cluster", cluster_lines[3], "Cluster lab: 1 node, 2 CPUs, 0 GPUs")
  expect("health: a cluster's GPUs", cluster_lines[4], "Cluster big: 3 nodes, 96 CPUs, 1 GPU (A100)")
  expect("health: a cluster's error", cluster_lines[5], "Cluster down: error: cluster 'down' is not reachable (Connection refused)")
  expect("health: a cluster not sampled yet", cluster_lines[6], "Cluster new: not sampled yet")
  local insight_status = table.concat(arena.status_lines({ active = with_insights, jobs = {} }), "\n")
  expect(
    "status: the active run's insights",
    insight_status:find("\n  run r1, step 900/2000, no checkpoint yet\n  ℹ edited-during-run: train.py changed after launch\n  ⚠ loss-spike (since", 1, true) ~= nil,
    true
  )
  expect("status: RAM", text:find("  RAM: 11.7 GB free of 15.6 GB (25% used)", 1, true) ~= nil, true)
  expect("status: no battery", text:find("  Battery: none", 1, true) ~= nil, true)
  expect("status: GPU", text:find("  GPU 0: H200, 97% busy, 2.0 GB / 140.4 GB, 41°C", 1, true) ~= nil, true)

  -- Work that a start or a stop would lose or overwrite (contract 7.1, 7.3), and @arena lines.
  expect("command ArenaRawLines exists", vim.fn.exists(":ArenaRawLines"), 2)
  local worklost = require("arena.worklost")
  local now = worklost.epoch("2026-12-01T16:00:00.000Z")
  expect("epoch of a wire time", now, 1796140800)
  local finished_run = { runId = "tiny-lm-1", step = 600, totalSteps = 600, endedAt = "2026-12-01T15:48:00.000Z" }
  local question, retry = arena.overwrite_question(
    "tiny-lm",
    { id = "tiny-lm", startStep = 600 },
    { code = 1012, message = "finished", data = { reason = "already-finished", run = finished_run } },
    now
  )
  expect(
    "1012: finished, its step and when, start over?",
    question,
    "tiny-lm is finished: it trained all 600 steps in run tiny-lm-1 (ended 2026-12-01 15:48 UTC, 12 min ago). Start over from step 0? The new run overwrites its checkpoints. [y/N] "
  )
  expect("1012: the retry is fresh", retry and retry.resume, false)
  expect("1012: the retry names no step", retry and retry.startStep, nil)
  expect(
    "1012: a fresh start is not asked again",
    arena.overwrite_question("tiny-lm", { id = "tiny-lm", resume = false }, { code = 1012, message = "x" }, now),
    nil
  )
  local checkpoint = { step = 600, path = "ckpt.pt", at = "2026-12-01T12:55:00.000Z", runId = "tiny-lm-1" }
  local mismatch, confirmed = arena.overwrite_question(
    "tiny-lm",
    { id = "tiny-lm", startStep = 50 },
    { code = 1011, message = "mismatch", data = { asked = 50, lastCheckpoint = checkpoint } },
    now
  )
  expect(
    "1011: the step and the checkpoint's age",
    mismatch,
    "You asked to start tiny-lm at step 50, but its last checkpoint is step 600 (ckpt.pt, saved 3 h 05 min ago by run tiny-lm-1). A plain start resumes from step 600. Start at step 50 anyway? [y/N] "
  )
  expect("1011: the retry confirms", confirmed and confirmed.confirm, true)
  expect("1011: the retry keeps the step", confirmed and confirmed.startStep, 50)
  expect(
    "1007 with an old checkpoint: what a stop loses",
    worklost.old_checkpoint_stop_prompt({
      lastCheckpoint = { step = 300, path = "ckpt.pt", at = "2026-12-01T15:54:00.000Z" },
      lost = { steps = 90, seconds = 240 },
    }, now),
    "This run's last checkpoint is step 300 (ckpt.pt, saved 6 min ago); stopping it now loses 90 steps (4 min) of training. Stop anyway? [y/N] "
  )
  expect("1007 without lost: the old prompt", worklost.old_checkpoint_stop_prompt({ runtimeSeconds = 60 }, now), nil)
  expect(
    "lost of a killed run",
    worklost.lost_line({ step = 390, stoppedBy = "kill", lastCheckpoint = { step = 300 }, lost = { steps = 90, seconds = 240 } }),
    "killed at step 390; last checkpoint 300: 90 steps (4 min) lost"
  )
  expect("lost unknown", worklost.lost_line({ step = 390, lost = vim.NIL }), nil)
  expect(
    "lost with unknown steps",
    worklost.lost_line({ stoppedBy = "signal", lost = { steps = vim.NIL, seconds = 95 } }),
    "stopped; no checkpoint: 2 min lost"
  )
  expect("spans", worklost.fmt_span(7500), "2 h 05 min")
  expect("an announcement", worklost.is_announcement({ stream = "stdout", text = '@arena {"event": "progress", "step": 1}' }), true)
  expect("not JSON is shown", worklost.is_announcement({ stream = "stdout", text = "@arena {oops" }), false)
  expect("stderr is shown", worklost.is_announcement({ stream = "stderr", text = '@arena {"event": "progress"}' }), false)
  expect("an array is shown", worklost.is_announcement({ stream = "stdout", text = '@arena ["event"]' }), false)

  local root = vim.fn.tempname()
  vim.fn.mkdir(root .. "/training", "p")
  vim.fn.mkdir(root .. "/src/deep", "p")
  vim.fn.writefile({ "{}" }, root .. "/training/manifest.json")
  expect("root found upward from a file", arena.find_root(root .. "/src/deep/train.py"), root)
  expect("root found from the root itself", arena.find_root(root), root)
  expect("no root outside a workspace", arena.find_root(vim.fn.fnamemodify(root, ":h") .. "/elsewhere.py"), nil)

  -- The plugin in modules: the pure core is usable on its own, and require("arena") hands out
  -- the same functions; the server's defaults come from the generated arena.server_defaults.
  local format = require("arena.format")
  expect("arena.format_run is the core's", arena.format_run == format.format_run, true)
  expect("the core formats on its own", format.format_run(running), "⟳ tiny-lm 45% loss 2.31 ETA 3m")
  expect("arena.status_lines is the core's", arena.status_lines == require("arena.status_view").status_lines, true)
  expect("arena.refusal_message is the core's", arena.refusal_message == require("arena.refusals").refusal_message, true)
  -- Contract 8.2: the status window says which checkpoint a resume took and why.
  local status_view = require("arena.status_view")
  local resumed_run = { runId = "r", jobId = "lm", status = "running", resumedFrom = { step = 20, path = "ckpt-20.pt",
    verified = "sha256", skipped = { { step = 40, path = "ckpt-40.pt", why = "is 3 bytes, 9 announced: torn or replaced" } } } }
  expect("resumedFrom in words", table.concat(status_view.resumed_lines(resumed_run), " | "),
    "resumed from step 20 (ckpt-20.pt), verified by sha256 | skipped step 40 (ckpt-40.pt): is 3 bytes, 9 announced: torn or replaced")
  expect("no resumedFrom, no lines", #status_view.resumed_lines({ resumedFrom = vim.NIL }), 0)
  local status_text = table.concat(status_view.status_lines({ active = resumed_run, jobs = {} }), "\n")
  expect("the status window shows it", status_text:find("resumed from step 20 (ckpt-20.pt), verified by sha256", 1, true) ~= nil, true)
  expect("arena.exit_message is the core's", arena.exit_message == require("arena.stderr").exit_message, true)
  local server_defaults = require("arena.server_defaults")
  expect("generated default: manifest", server_defaults["manifest"], "training/manifest.json")
  expect("generated default: preflight.minFreeRamMb", server_defaults["preflight.minFreeRamMb"], 5120)
  expect("generated defaults leave a null default out", server_defaults["device.fp32Only"], nil)
  expect("an empty object default stays an object", vim.json.encode(server_defaults["clusters"]), "{}")

  -- Decisions of the core (arena.runs): which run the statusline shows, when the log window
  -- moves on, whether a probe's verdict is new.
  local runs = require("arena.runs")
  local live_a = { runId = "a", status = "running" }
  local done_b = { runId = "b", status = "stopped" }
  expect("a finished run does not hide a live one", runs.shown_after(live_a, done_b).runId, "a")
  expect("a shown run's own update replaces it", runs.shown_after(live_a, { runId = "a", status = "stopped" }).status, "stopped")
  expect("a live run replaces a finished one", runs.shown_after(done_b, { runId = "c", status = "starting" }).runId, "c")
  expect("the first run is shown", runs.shown_after(nil, done_b).runId, "b")
  expect("the log window moves on to a new run", runs.log_moves_on({ runId = "b" }, live_a, done_b), true)
  expect("it stays while its run is live", runs.log_moves_on({ runId = "a2" }, live_a, { runId = "a2", status = "running" }), false)
  expect("it waits for the first run", runs.log_moves_on({ runId = "" }, live_a, nil), true)
  expect("no log window, nothing moves", runs.log_moves_on(nil, live_a, nil), false)
  expect("a finished run is not followed", runs.log_moves_on({ runId = "b" }, { runId = "c", status = "crashed" }, done_b), false)
  local verdict = { ok = false, at = "2026-12-01T10:00:00Z" }
  expect("the first verdict is new", runs.is_new_verdict(verdict, nil), true)
  expect("the same verdict is not", runs.is_new_verdict(verdict, { ok = false, at = "2026-12-01T10:00:00Z" }), false)
  expect("a later verdict is new", runs.is_new_verdict(verdict, { ok = false, at = "2026-12-01T09:00:00Z" }), true)
  expect("no verdict yet (false or vim.NIL)", runs.is_new_verdict(false, nil) or runs.is_new_verdict(vim.NIL, nil), false)

  -- A run's kept log lines (arena.logstore): each seq once, in order, trimmed; what is shown next.
  local logstore = require("arena.logstore")
  local store = logstore.new()
  logstore.add(store, { { seq = 3, stream = "stdout", text = "c" }, { seq = 4, stream = "stderr", text = "d" } })
  logstore.add(store, { { seq = 1, stream = "stdout", text = "a" }, { seq = 3, stream = "stdout", text = "c again" } })
  logstore.add(store, { { seq = vim.NIL, text = "no seq" }, { seq = 2, stream = "stdout", text = '@arena {"event": "progress", "step": 2}' } })
  local seqs = {}
  for _, line in ipairs(store.lines) do
    table.insert(seqs, line.seq .. "=" .. line.text:sub(1, 7))
  end
  expect("a backfill overlapping live lines: in order, each seq once", table.concat(seqs, " "), "1=a 2=@arena  3=c 4=d")
  local shown_lines, last = logstore.unshown(store, 1, false)
  expect("the next lines, @arena hidden", table.concat(shown_lines, "|"), "c|[stderr] d")
  expect("the last seq they cover", last, 4)
  expect("raw lines shown when asked", #logstore.unshown(store, 1, true), 3)
  expect("nothing new after the last", #logstore.unshown(store, 4, false), 0)
  local small = logstore.new()
  logstore.add(small, { { seq = 1, text = "1" }, { seq = 2, text = "2" }, { seq = 3, text = "3" } }, 2)
  expect("the oldest lines go past the limit", small.lines[1].seq .. "," .. small.lines[2].seq .. "," .. #small.lines, "2,3,2")
  logstore.add(small, { { seq = 1, text = "1 again" } }, 2)
  expect("a line older than the kept ones is trimmed again", small.lines[1].seq .. "," .. #small.lines, "2,2")

  -- A run a restart of the machine interrupted (contract 8.3): offered, once told, and the record.
  local function interrupted(run_id, after, job_id)
    local info = { policy = "ask", step = 500, offer = "Resume from step 500" }
    for key, value in pairs(after or {}) do
      info[key] = value
    end
    return {
      runId = run_id,
      jobId = job_id or "tiny-lm",
      status = "crashed",
      failure = { kind = "machine-restarted", evidence = "the machine restarted" },
      afterReboot = info,
    }
  end
  local offer = arena.reboot_offer(interrupted("r1"))
  expect("the offer's button is the server's words", offer and offer.label, "Resume from step 500")
  expect(
    "the offer's message",
    offer and offer.message,
    "tiny-lm was interrupted by a restart of the machine (run r1). Resume from step 500?"
  )
  expect("taking the offer resumes at its step", offer and offer.extra.resume == true and offer.extra.startStep, 500)
  local by_path = arena.reboot_offer(interrupted("r1", { path = "out/checkpoint-500" }))
  expect(
    "a {path} resume's offer names the checkpoint's path (contract 8.1)",
    by_path and (by_path.label .. " | " .. by_path.message),
    "Resume from step 500 | tiny-lm was interrupted by a restart of the machine (run r1). "
      .. "Resume from step 500 (its checkpoint out/checkpoint-500)?"
  )
  expect("a null path names none", arena.reboot_offer(interrupted("r1", { path = vim.NIL })).message:sub(-21), "Resume from step 500?")
  local listed = table.concat(arena.status_lines({ runs = { interrupted("p", { path = "out/c-500" }) }, jobs = {} }), "\n")
  expect("the status window names it too", listed:find("tiny%-lm %[p%]: Resume from step 500 %(its checkpoint out/c%-500%)") ~= nil, true)
  expect("a resumed run offers nothing", arena.reboot_offer(interrupted("r1", { offer = vim.NIL, resumedBy = "r2" })), nil)
  expect("never offers nothing", arena.reboot_offer(interrupted("r1", { policy = "never", offer = vim.NIL })), nil)
  expect("a run no restart ended offers nothing", arena.reboot_offer(running), nil)
  local problem = arena.reboot_offer(interrupted("r1", { policy = "resume", problem = "pre-flight failed" }))
  expect("why it was not resumed by itself", problem and problem.message:find("not resumed by itself: pre%-flight failed") ~= nil, true)
  local laptop = require("arena.laptop")
  local told = {}
  local both = { interrupted("old"), interrupted("new", nil, "other") }
  expect("new offers, newest first", #laptop.new_offers(both, told) .. laptop.reboot_offers(both)[1].run_id, "2new")
  expect("each offer is told once", #laptop.new_offers(both, told), 0)
  local offered = table.concat(arena.status_lines({ runs = both, jobs = {} }), "\n")
  expect(
    "the status window lists the offers",
    offered:find("Interrupted by a restart of the machine %(:ArenaResumeInterrupted%):\n  other %[new%]: Resume from step 500") ~= nil,
    true
  )
  expect("the commit and dirty", arena.commit_text({ git = { commit = "0123456789abcdef", dirty = true } }), "0123456789ab (dirty)")
  expect("no repository", arena.commit_text({ git = vim.NIL }), nil)
  local recorded = vim.tbl_extend("force", running, {
    record = { git = { commit = "abc", dirty = false }, python = { path = "py -3.10 -E", version = "3.10" }, host = "LAPTOP" },
  })
  local with_record = table.concat(arena.status_lines({ active = recorded, jobs = {} }), "\n")
  expect("the status window shows the record", with_record:find("  code: abc\n  python: py %-3.10 %-E %(3.10%)\n  host: LAPTOP") ~= nil, true)
  expect("a record without git", table.concat(arena.record_lines({ git = vim.NIL }), "|"), "code: not in a git repository")

  -- RunInfo.keepAwake (contract 8.3), in the words of every client; the reason is the agent's log line.
  local reason = "cannot reach the system bus: no such file"
  local function awake(value)
    return vim.tbl_extend("force", running, { keepAwake = value })
  end
  expect("keep awake: true", arena.keep_awake_text(awake(true)), "keeping the machine awake")
  expect("keep awake: false", arena.keep_awake_text(awake(false)), "not keeping the machine awake")
  expect("keep awake: null, the reason", arena.keep_awake_text(awake(vim.NIL), reason), "the machine may sleep: " .. reason)
  expect("keep awake: null without its line claims nothing", arena.keep_awake_text(awake(vim.NIL)), nil)
  expect("keep awake: null (a missing key on 0.7)", arena.keep_awake_text(running, reason), "the machine may sleep: " .. reason)
  expect("keep awake: nothing once the run ended", arena.keep_awake_text(vim.tbl_extend("force", awake(true), { status = "succeeded" })), nil)
  local said = { seq = 2, stream = "arena", text = laptop.KEEP_AWAKE_LINE .. reason }
  local lie = { seq = 1, stream = "stdout", text = laptop.KEEP_AWAKE_LINE .. "a trainer's print" }
  expect("keep awake: the agent's line, not a trainer's", arena.keep_awake_reason({ { seq = 0, stream = "arena", text = "started" }, lie, said }), reason)
  expect("keep awake: no line, no reason", arena.keep_awake_reason({ lie }), nil)
  local sleepy = awake(vim.NIL)
  sleepy.runId = "r-sleepy"
  local awake_status = table.concat(arena.status_lines({ active = sleepy, jobs = {} }, { ["r-sleepy"] = reason }), "\n")
  expect("the status window says why the machine may sleep", awake_status:find("\n  the machine may sleep: " .. reason, 1, true) ~= nil, true)

  -- setup{} refills the one config table every module reads.
  local settings = require("arena.settings")
  local config = arena.config
  local other = vim.fn.tempname()
  vim.fn.mkdir(other .. "/conf", "p")
  vim.fn.mkdir(other .. "/src", "p")
  vim.fn.writefile({ "{}" }, other .. "/conf/jobs.json")
  arena.setup({ settings = { manifest = "./conf/jobs.json", python = { "py", "-3.10", "-E" } }, autostart = false })
  expect("setup keeps the config table", arena.config == config and settings.config == config, true)
  expect("setup takes the manifest setting", arena.find_root(other .. "/src/train.py"), other)
  expect("the manifest setting replaces the default", arena.find_root(root .. "/src/deep/train.py"), nil)
  expect("a user's list stays a list", vim.json.encode(arena.config.settings.python), '["py","-3.10","-E"]')
  expect("options left out keep their defaults", table.concat(arena.config.cmd, " "), "python3 -m arena_ls")
  arena.toggle_raw_lines()
  expect(":ArenaRawLines flips the shared option", settings.config.show_raw_lines, true)
  arena.setup({})
  expect("setup({}) goes back to the defaults", arena.config.show_raw_lines == false and next(arena.config.settings) == nil, true)
  expect("the default manifest again (from server_defaults)", arena.find_root(root .. "/src/deep/train.py"), root)
  expect("no settings are sent as an empty object", vim.json.encode(settings.server_settings()), "{}")
end

--- One wording: the plugin says what the terminal client says for the same server answer (every
--- case of tests/editor/fixtures/wording_cases.json, written from the Python client's functions).
local function wording_cases()
  local refusals = require("arena.refusals")
  expect(
    "a refusal's reason by its code, every code of arena_ls/errors.py (generated)",
    refusals.refusal_message("stop the run", { code = 1013, message = "the head is down" }),
    "cannot stop the run (cluster-unreachable): the head is down"
  )
  local worklost = require("arena.worklost")
  local laptop = require("arena.laptop")
  local file = assert(io.open(os.getenv("ARENA_WORDING_CASES"), "r"))
  local fixture = vim.json.decode(file:read("*a"))
  file:close()
  local now = worklost.epoch(fixture.now)
  local function prompt(text)
    return text and (text .. " [y/N] ") or nil
  end
  local functions = {
    span = function(seconds) return worklost.fmt_span(seconds) end,
    checkpoint = function(checkpoint) return worklost.checkpoint_words(checkpoint, now) end,
    finishedPrompt = function(job, run) return worklost.finished_prompt(job, run, now) end,
    mismatchPrompt = function(job, data) return worklost.mismatch_prompt(job, data, now) end,
    stopPrompt = function(data) return worklost.stop_question(data, now) end,
    lostLine = function(run) return worklost.lost_line(run) end,
    stoppedNotice = function(run) return worklost.stopped_notice(run) end,
    keepAwakeText = function(run, reason) return laptop.keep_awake_text(run, reason) end,
    rebootOffer = function(run)
      local offer = laptop.reboot_offer(run)
      return offer and offer.message or nil
    end,
  }
  local asks = { finishedPrompt = true, mismatchPrompt = true, stopPrompt = true }
  local count = 0
  for index, case in ipairs(fixture.cases) do
    local args = {}
    for position = 1, #case.args do
      local value = case.args[position]
      args[position] = value ~= vim.NIL and value or nil
    end
    local expected = case.text ~= vim.NIL and case.text or nil
    if asks[case.fn] then
      expected = prompt(expected)
    end
    local fn = functions[case.fn] or function()
      return "no function for " .. case.fn
    end
    local said = fn(unpack(args, 1, #case.args))
    expect("wording case " .. index .. " (" .. case.fn .. ")", said, expected)
    count = count + 1
  end
  expect("wording cases were read", count >= 30, true)
end

local function all()
  session()
  wording_cases()
end

local ok, err = xpcall(all, debug.traceback)
if not ok then
  results.error = tostring(err)
end
save()
vim.cmd(ok and "qall!" or "cquit 1")
