-- arena.nvim: what :ArenaRun, :ArenaProbe and :ArenaStop do: the requests,
-- the questions on a refusal that the person may overrule (approval, a start
-- that would overwrite work, a probe first, a stop without a checkpoint) and
-- their retries, waiting for a probe's verdict, and job completion. The words
-- come from arena.format, arena.refusals and arena.worklost.

local client = require("arena.client")
local format = require("arena.format")
local laptop = require("arena.laptop")
local refusals = require("arena.refusals")
local runs = require("arena.runs")
local runstate = require("arena.state")
local status_view = require("arena.status_view")
local util = require("arena.util")
local worklost = require("arena.worklost")

local val, notify, request = util.val, client.notify, client.request
local state = runstate.state
local remember_status = runstate.remember_status

local M = {}

--- A status change, as if the server had sent it (the answer of a start or a stop is one).
local function status_changed(run)
  client.handlers["arena/statusChanged"](nil, run)
end

--- After a probe run ends, `arena/status` is read this often (ms), this many times, for its verdict.
local VERDICT_POLL_MS = 250
local VERDICT_POLLS = 40

--- Asks `prompt`; a yes (`y...`) runs `on_yes`, anything else (or <Esc>) does nothing.
local function confirm(prompt, on_yes)
  vim.ui.input({ prompt = prompt }, function(answer)
    if answer and answer:match("^%s*[yY]") then
      on_yes()
    end
  end)
end

--- Starts job `id`; on approval-required, asks and retries with approved = true; on a start
--- that would overwrite work (already finished, a mismatched step), asks and retries with what
--- the person agreed to. `extra` adds params (resume, startStep, confirm).
function M.start(id, approved, extra)
  local params = vim.tbl_extend("force", { id = id }, extra or {})
  if approved then
    params.approved = true
  end
  request("arena/start", params, function(err, run)
    if err then
      local question, retry = refusals.overwrite_question(id, params, err, os.time())
      if question then
        confirm(question, function()
          M.start(id, approved, { resume = retry.resume, startStep = retry.startStep, confirm = retry.confirm })
        end)
      elseif err.code == 1002 and not approved then
        confirm("Run " .. id .. "? It needs approval. [y/N] ", function()
          M.start(id, true, extra)
        end)
      elseif err.code == 1010 then
        -- The probe is a run of its own; its verdict decides whether the job may start.
        confirm(format.probe_prompt(id, err), function()
          M.probe(id, approved)
        end)
      else
        notify(refusals.refusal_message("start " .. id, err), vim.log.levels.ERROR)
      end
      return
    end
    status_changed(run)
    notify("started " .. id .. " (run " .. tostring(val(run.runId)) .. ")")
  end)
end

--- Runs whose resume after a restart of the machine was told in this session (by run id).
local reboot_offers_told = {}

--- :ArenaResumeInterrupted: pick a run a restart of the machine interrupted and resume it from
--- its offered step (contract 8.3). With `quiet` (when the client starts) only a new offer is
--- told, once, as a notification naming the command.
function M.resume_interrupted(quiet)
  request("arena/status", vim.empty_dict(), function(err, status)
    if err or type(status) ~= "table" then
      return
    end
    remember_status(status)
    local runs_now = val(status.runs) or {}
    if quiet then
      for _, offer in ipairs(laptop.new_offers(runs_now, reboot_offers_told)) do
        notify(offer.message .. " (:ArenaResumeInterrupted)", vim.log.levels.WARN)
      end
      return
    end
    local offers = laptop.reboot_offers(runs_now)
    if #offers == 0 then
      notify("no run waits for a resume after a restart of the machine")
      return
    end
    vim.ui.select(offers, {
      prompt = "Resume which interrupted run?",
      format_item = function(item)
        return item.message
      end,
    }, function(choice)
      if choice then
        M.start(choice.job_id, false, choice.extra)
      end
    end)
  end)
end

table.insert(client.init_hooks, function()
  M.resume_interrupted(true)
end)

--- :ArenaRun [job]: with no job, pick one from `arena/status`.
function M.run(job)
  if job and job ~= "" then
    M.start(job, false)
    return
  end
  request("arena/status", vim.empty_dict(), function(err, status)
    if err then
      notify("arena/status failed: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    remember_status(status)
    local jobs = val(status.jobs) or {}
    if #jobs == 0 then
      notify("the manifest lists no jobs", vim.log.levels.WARN)
      return
    end
    vim.ui.select(jobs, {
      prompt = "Run which job?",
      format_item = function(item)
        if val(item.runnable) then
          local probe = format.probe_text(item.probe)
          return "▶ " .. item.id .. " (" .. (val(item.kind) or "task") .. ")" .. (probe and (" · " .. probe) or "")
        end
        return "⊘ " .. item.id .. " blocked: " .. status_view.blocked_summary(item)
      end,
    }, function(choice)
      if not choice then
        return
      end
      if not val(choice.runnable) then
        notify(choice.id .. " cannot run: " .. status_view.blocked_reasons(choice), vim.log.levels.ERROR)
        return
      end
      M.start(choice.id, false)
    end)
  end)
end

--- Reads `arena/status` until the job's probe verdict differs from `before` (the server
--- records it just after the probe run ends), then shows it.
local function show_verdict(job_id, before, polls)
  request("arena/status", vim.empty_dict(), function(err, status)
    local probe = nil
    if not err and type(status) == "table" then
      remember_status(status)
      probe = state.probes[job_id] or nil
    end
    if runs.is_new_verdict(probe, before) then
      state.last_verdict = { job = job_id, probe = probe }
      notify(format.verdict_message(job_id, probe), probe.ok and vim.log.levels.INFO or vim.log.levels.WARN)
    elseif polls > 1 then
      vim.defer_fn(function()
        show_verdict(job_id, before, polls - 1)
      end, VERDICT_POLL_MS)
    else
      notify("the probe of " .. job_id .. " ended without a verdict; see :LspLog", vim.log.levels.WARN)
    end
  end)
end

--- A followed probe run that ended: wait for its verdict and show it.
function M.follow_probe(run)
  local pending = state.pending_probes[run.runId]
  if not pending or format.is_live(run) then
    return
  end
  state.pending_probes[run.runId] = nil
  vim.schedule(function()
    show_verdict(pending.job, pending.before, VERDICT_POLLS)
  end)
end

--- :ArenaProbe job: runs the job's VRAM probe (`arena/start {id, probe: true}`) as a run of
--- job `<id>.probe`, then shows its verdict. On approval-required, asks and retries.
function M.probe(id, approved)
  if not id or id == "" then
    notify("which job? :ArenaProbe JOB", vim.log.levels.ERROR)
    return
  end
  local params = { id = id, probe = true }
  if approved then
    params.approved = true
  end
  request("arena/status", vim.empty_dict(), function(status_err, status)
    if not status_err and type(status) == "table" then
      remember_status(status)
    end
    local before = state.probes[id] or nil
    request("arena/start", params, function(err, run)
      if err then
        if err.code == 1002 and not approved then
          confirm("Probe " .. id .. "? It needs approval. [y/N] ", function()
            M.probe(id, true)
          end)
        else
          notify(refusals.refusal_message("probe " .. id, err), vim.log.levels.ERROR)
        end
        return
      end
      state.pending_probes[run.runId] = { job = id, before = before }
      notify("probing " .. id .. " (run " .. tostring(val(run.runId)) .. ")")
      local known = state.runs[run.runId]
      if known and not format.is_live(known) then
        -- A statusChanged said the probe ended before this answer came.
        M.follow_probe(known)
      else
        status_changed(run)
      end
    end)
  end)
end

--- Train job ids for :ArenaProbe completion (from the last arena/status).
function M.complete_probe_jobs(prefix)
  local found = {}
  for _, id in ipairs(M.complete_jobs(prefix)) do
    if state.train_jobs[id] then
      table.insert(found, id)
    end
  end
  return found
end

--- :ArenaStop[!]: stops the active run; `!` kills it. On no-checkpoint, asks and retries with confirm = true.
function M.stop(opts)
  opts = opts or {}
  local params = {}
  if opts.kill then
    params.kill = true
  end
  if opts.confirm then
    params.confirm = true
  end
  if next(params) == nil then
    params = vim.empty_dict()
  end
  request("arena/stop", params, function(err, result)
    if err then
      if err.code == 1007 and not opts.confirm then
        local data = type(val(err.data)) == "table" and err.data or {}
        local prompt = worklost.stop_question(data, os.time())
        confirm(prompt, function()
          M.stop({ kill = opts.kill, confirm = true })
        end)
      else
        notify(refusals.refusal_message("stop the run", err), vim.log.levels.ERROR)
      end
      return
    end
    if type(result) == "table" and val(result.runId) then
      status_changed(result)
      notify(worklost.stopped_notice(result))
    else
      notify("nothing is running")
    end
  end)
end

--- Job ids for :ArenaRun completion (from the last arena/status).
function M.complete_jobs(prefix)
  local found = {}
  for _, id in ipairs(state.jobs) do
    if vim.startswith(id, prefix or "") then
      table.insert(found, id)
    end
  end
  return found
end

return M
