-- arena.nvim: the laptop (contract 8.3): a run a restart of the machine interrupted, and the
-- run record. `RunInfo.afterReboot.offer` ("Resume from step N") is set while a person may
-- resume the run; taking it starts the job with resume = true at that step. Pure.

local format = require("arena.format")
local util = require("arena.util")
local wording = require("arena.wording")

local say = wording.say

local val, is_number = util.val, util.is_number

local M = {}

--- The offer of one run: { run_id, job_id, label, from, message, extra } (extra: the start's params;
--- from: " (its checkpoint PATH)" when the server names the path, else ""),
--- or nil when it has none (not interrupted, resumed, superseded, `never`).
function M.reboot_offer(run)
  local info = val(run.afterReboot)
  if type(info) ~= "table" then
    return nil
  end
  local offer, step = val(info.offer), val(info.step)
  if type(offer) ~= "string" or offer == "" or not is_number(step) then
    return nil
  end
  local problem = val(info.problem)
  local why = problem and say("rebootNotResumed", { problem = tostring(problem) }) or ""
  -- Contract 8.1: a job resumed from the checkpoint's path ({path}) is told which file.
  local path = val(info.path)
  local from = (type(path) == "string" and path ~= "") and say("rebootFrom", { path = path }) or ""
  return {
    run_id = val(run.runId),
    job_id = val(run.jobId),
    label = offer,
    from = from,
    message = say("rebootOffer", {
      job = tostring(val(run.jobId)),
      runId = tostring(val(run.runId)),
      why = why,
      offer = offer,
      checkpointFrom = from,
    }),
    extra = { resume = true, startStep = step },
  }
end

--- Every run's offer, newest run first (`runs` is oldest first, as `arena/status` sends it).
function M.reboot_offers(runs)
  local offers = {}
  for index = #runs, 1, -1 do
    local offer = M.reboot_offer(runs[index])
    if offer then
      table.insert(offers, offer)
    end
  end
  return offers
end

--- The offers not told yet; `told` (a set of run ids) remembers them.
function M.new_offers(runs, told)
  local fresh = {}
  for _, offer in ipairs(M.reboot_offers(runs)) do
    if not told[offer.run_id] then
      told[offer.run_id] = true
      table.insert(fresh, offer)
    end
  end
  return fresh
end

--- "abc1234" or "abc1234 (dirty)"; nil without a record or a repository.
function M.commit_text(record)
  record = val(record)
  local git = type(record) == "table" and val(record.git) or nil
  if type(git) ~= "table" then
    return nil
  end
  local commit = val(git.commit)
  local text = type(commit) == "string" and commit ~= "" and commit:sub(1, 12) or "no commit yet"
  return val(git.dirty) and (text .. " (dirty)") or text
end

--- The run record in a few lines (the status window's active run).
function M.record_lines(record)
  record = val(record)
  if type(record) ~= "table" then
    return {}
  end
  local lines = { "code: " .. (M.commit_text(record) or "not in a git repository") }
  local python = val(record.python)
  if type(python) == "table" and val(python.path) then
    local version = val(python.version)
    table.insert(lines, "python: " .. tostring(python.path) .. (version and (" (" .. tostring(version) .. ")") or ""))
  end
  if val(record.host) then
    table.insert(lines, "host: " .. tostring(record.host))
  end
  return lines
end

--- The status window's section of offers (empty when none waits).
function M.offer_lines(runs)
  local offers = M.reboot_offers(runs)
  if #offers == 0 then
    return {}
  end
  local lines = { "", "Interrupted by a restart of the machine (:ArenaResumeInterrupted):" }
  for _, offer in ipairs(offers) do
    local job, run_id = tostring(offer.job_id), tostring(offer.run_id)
    table.insert(lines, string.format("  %s [%s]: %s%s", job, run_id, offer.label, offer.from))
  end
  return lines
end

--- The agent's log line when the platform does not allow keeping the machine awake (contract 8.3).
M.KEEP_AWAKE_LINE = "the machine cannot be kept awake during this run: "
--- How many of the run's first log lines are read for that line (it comes as the agent starts,
--- after what the trainer printed by then).
M.REASON_LOG_LINES = 1000
--- At most this many reads of a run's log for the line (a run whose agent has not decided yet).
M.REASON_ASKS = 3

--- The reason of the first `arena` line saying the machine cannot be kept awake, or nil.
function M.keep_awake_reason(lines)
  local prefix = M.KEEP_AWAKE_LINE
  for _, line in ipairs(val(lines) or {}) do
    local text = type(line) == "table" and val(line.text) or nil
    if type(line) == "table" and val(line.stream) == "arena" and type(text) == "string" and text:sub(1, #prefix) == prefix then
      local reason = vim.trim(text:sub(#prefix + 1))
      return reason ~= "" and reason or nil
    end
  end
  return nil
end

--- A live run's `RunInfo.keepAwake` in the words every client uses; nil once the run ended, and for
--- a null without its log's line (the agent, started after the trainer, may not have decided yet).
--- A null arrives as a missing key on 0.7, so a missing one reads as null (this server always sends it).
function M.keep_awake_text(run, reason)
  if type(run) ~= "table" or not format.is_live(run) then
    return nil
  end
  local value = val(run.keepAwake)
  if value == true then
    return say("keepingAwake")
  end
  if value == false then
    return say("notKeepingAwake")
  end
  return reason and say("maySleep", { reason = reason }) or nil
end

return M
