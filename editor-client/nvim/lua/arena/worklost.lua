-- arena.nvim: the words for work a start or a stop would lose or overwrite
-- (contract 7.1 and 7.3), and which log lines are the trainer's own `@arena`
-- announcements. Pure: no editor state, the clock passed in (seconds since
-- the epoch, UTC), so tests/editor/nvim_unit.lua checks every text. The texts are
-- arena_ls/wording.py's (generated into arena.wording); nvim_unit.lua also checks these
-- functions against tests/editor/fixtures/wording_cases.json, the terminal client's words.

local wording = require("arena.wording")

local say = wording.say

local M = {}

--- vim.NIL (a JSON null) as nil.
local function val(value)
  if value == vim.NIL then
    return nil
  end
  return value
end

local function is_table(value)
  return type(val(value)) == "table"
end

local function is_finite(value)
  return type(value) == "number" and value == value and value ~= math.huge and value ~= -math.huge
end

local function scalar(value)
  value = val(value)
  if type(value) == "number" then
    return value == math.floor(value) and string.format("%d", value) or tostring(value)
  end
  return type(value) == "string" and value or "?"
end

--- A span of work at a glance: `45 s`, `4 min`, `2 h 05 min`.
function M.fmt_span(seconds)
  seconds = val(seconds)
  if not is_finite(seconds) then
    return say("spanUnknown")
  end
  local total = math.max(0, math.floor(seconds + 0.5))
  if total == 0 and seconds > 0 then
    return say("spanUnderSecond")
  end
  if total < 60 then
    return say("spanSeconds", { seconds = total })
  end
  local minutes = math.floor(total / 60 + 0.5)
  if minutes < 60 then
    return say("spanMinutes", { minutes = minutes })
  end
  return say("spanHours", { hours = math.floor(minutes / 60), minutes = string.format("%02d", minutes % 60) })
end

--- Days from 1970-01-01 to a civil date (H. Hinnant's algorithm): os.time reads local time.
local function days_from_civil(y, m, d)
  if m <= 2 then
    y = y - 1
  end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

--- An ISO 8601 UTC time from the wire (`2026-12-01T15:48:00.000Z`) in epoch seconds, else nil.
function M.epoch(iso)
  iso = val(iso)
  if type(iso) ~= "string" then
    return nil
  end
  local y, mo, d, h, mi, s = iso:match("^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)")
  if not y then
    return nil
  end
  return days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
end

--- `3 h 05 min ago`, or `at an unknown time`.
function M.fmt_age(at, now)
  local moment = M.epoch(at)
  if not moment then
    return say("unknownTime")
  end
  return say("ago", { span = M.fmt_span(now - moment) })
end

--- `2026-12-01 15:48 UTC, 12 min ago`.
function M.fmt_when(at, now)
  local moment = M.epoch(at)
  if not moment then
    return say("unknownTime")
  end
  return say("when", { date = at:sub(1, 10), time = at:sub(12, 16), age = M.fmt_age(at, now) })
end

--- `step 600 (checkpoints/ckpt.pt, saved 3 h 05 min ago by run r-1)`.
function M.checkpoint_words(checkpoint, now)
  if not is_table(checkpoint) then
    return say("noCheckpoint")
  end
  local details = {}
  if type(val(checkpoint.path)) == "string" and checkpoint.path ~= "" then
    table.insert(details, checkpoint.path)
  end
  local age = M.fmt_age(checkpoint.at, now)
  if type(val(checkpoint.runId)) == "string" and checkpoint.runId ~= "" then
    table.insert(details, say("checkpointSavedBy", { age = age, runId = checkpoint.runId }))
  else
    table.insert(details, say("checkpointSaved", { age = age }))
  end
  return say("checkpoint", { step = scalar(checkpoint.step), details = table.concat(details, ", ") })
end

--- `90 steps (4 min)`, or `4 min` when the steps are not known (`steps` null).
function M.lost_amount(lost)
  local steps = val(lost.steps)
  local span = M.fmt_span(lost.seconds)
  if type(steps) == "number" and steps == math.floor(steps) then
    return steps == 1 and say("lostStep", { span = span }) or say("lostSteps", { steps = scalar(steps), span = span })
  end
  return span
end

--- A question as the plugin asks it: the warning, what to answer, and the answers.
function M.prompt(warning, question)
  return say("prompt", { warning = warning, question = question }) .. " [y/N] "
end

--- 1012: the job trained all its steps; the question offers a fresh start.
function M.finished_prompt(job_id, run, now)
  run = is_table(run) and run or {}
  local steps = val(run.totalSteps)
  if steps == nil then
    steps = val(run.step)
  end
  local what = steps ~= nil and say("finishedSteps", { steps = scalar(steps) }) or say("finishedAllSteps")
  local by = (type(val(run.runId)) == "string" and run.runId ~= "") and say("finishedInRun", { runId = run.runId }) or ""
  local words = say("finished", { job = job_id, what = what, by = by, when = M.fmt_when(val(run.endedAt), now) })
  return M.prompt(words, say("finishedQuestion"))
end

--- 1011: the step asked for against the job's last checkpoint, with its age.
function M.mismatch_prompt(job_id, data, now)
  local asked = scalar(data.asked)
  local last = val(data.lastCheckpoint)
  local words = say("mismatch", { job = job_id, asked = asked, checkpoint = M.checkpoint_words(last, now) })
  if is_table(last) then
    words = words .. ". " .. say("mismatchResumes", { start = say("mismatchPlainStart"), step = scalar(last.step) })
  end
  return M.prompt(words, say("mismatchQuestion", { asked = asked }))
end

--- 1007 with an old checkpoint: how much stopping now loses; nil without `lost`.
function M.old_checkpoint_stop_prompt(data, now)
  if not (is_table(data.lost) and is_table(data.lastCheckpoint)) then
    return nil
  end
  local words = say("stopOldCheckpoint", { checkpoint = M.checkpoint_words(data.lastCheckpoint, now), amount = M.lost_amount(data.lost) })
  return M.prompt(words, say("stopQuestion"))
end

--- 1007 without a checkpoint: the run's whole runtime (`runtimeSeconds`: `3 s`, `12 min`) is lost,
--- or all of its training when the server does not say.
function M.no_checkpoint_stop_prompt(runtime_seconds)
  runtime_seconds = val(runtime_seconds)
  if is_finite(runtime_seconds) and runtime_seconds >= 0 then
    return M.prompt(say("stopLoses", { span = M.fmt_span(runtime_seconds) }), say("stopQuestion"))
  end
  return M.prompt(say("stopLosesAll"), say("stopQuestion"))
end

--- The 1007 question, whichever the refusal's data says: an old checkpoint's `lost`, else the runtime.
function M.stop_question(data, now)
  return M.old_checkpoint_stop_prompt(data, now) or M.no_checkpoint_stop_prompt(data.runtimeSeconds)
end

local STOP_VERBS = { kill = "stoppedKill", battery = "stoppedBattery" }

--- `killed at step 390; last checkpoint 300: 90 steps (4 min) lost` from a stopped run's
--- `lost`; nil when the run says nothing of it (null or absent).
function M.lost_line(run)
  if not is_table(run) or not is_table(run.lost) then
    return nil
  end
  local verb = say(STOP_VERBS[val(run.stoppedBy) or ""] or "stopped")
  local last = is_table(run.lastCheckpoint) and val(run.lastCheckpoint.step) or nil
  local where = val(run.step) ~= nil and say("stoppedAt", { verb = verb, step = scalar(run.step) }) or verb
  if val(run.lost.steps) == 0 then
    if last == nil then
      return say("lostNothing", { where = where })
    end
    return say("lostNothingSaved", { where = where, step = scalar(last) })
  end
  if last == nil then
    return say("lostNoCheckpoint", { where = where, amount = M.lost_amount(run.lost) })
  end
  return say("lostSince", { where = where, step = scalar(last), amount = M.lost_amount(run.lost) })
end

--- The notice of a stop's result: `tiny-lm killed at step 390; last checkpoint 300: 90 steps (4 min) lost`,
--- else `tiny-lm stopped`.
function M.stopped_notice(run)
  run = is_table(run) and run or {}
  local lost = M.lost_line(run)
  if lost == nil then
    return say("runEnded", { job = scalar(run.jobId), status = scalar(run.status) })
  end
  return say("runStopped", { job = scalar(run.jobId), lost = lost })
end

local PREFIX = "@arena "
local LONGEST = 64 * 1024

--- Whether a LogLine is a well-formed `@arena` announcement on the trainer's stdout (hidden in
--- the log window unless raw lines are shown); a line that only looks like one is shown.
function M.is_announcement(line)
  if not is_table(line) or val(line.stream) ~= "stdout" then
    return false
  end
  local text = val(line.text)
  if type(text) ~= "string" or text:sub(1, #PREFIX) ~= PREFIX or #text > LONGEST then
    return false
  end
  local ok, payload = pcall(vim.json.decode, text:sub(#PREFIX + 1))
  return ok and type(payload) == "table" and not vim.tbl_islist(payload) and type(payload.event) == "string"
end

return M
