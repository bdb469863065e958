-- arena.nvim: the words for work a start or a stop would lose or overwrite
-- (contract 7.1 and 7.3), and which log lines are the trainer's own `@arena`
-- announcements. Pure: no editor state, the clock passed in (seconds since
-- the epoch, UTC), so tests/editor/nvim_unit.lua checks every text.

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
    return "?"
  end
  local total = math.max(0, math.floor(seconds + 0.5))
  if total < 60 then
    return total .. " s"
  end
  local minutes = math.floor(total / 60 + 0.5)
  if minutes < 60 then
    return minutes .. " min"
  end
  return string.format("%d h %02d min", math.floor(minutes / 60), minutes % 60)
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
    return "at an unknown time"
  end
  return M.fmt_span(now - moment) .. " ago"
end

--- `2026-12-01 15:48 UTC, 12 min ago`.
function M.fmt_when(at, now)
  local moment = M.epoch(at)
  if not moment then
    return "at an unknown time"
  end
  return at:sub(1, 10) .. " " .. at:sub(12, 16) .. " UTC, " .. M.fmt_age(at, now)
end

--- `step 600 (checkpoints/ckpt.pt, saved 3 h 05 min ago by run r-1)`.
function M.checkpoint_words(checkpoint, now)
  if not is_table(checkpoint) then
    return "no checkpoint"
  end
  local details = {}
  if type(val(checkpoint.path)) == "string" and checkpoint.path ~= "" then
    table.insert(details, checkpoint.path)
  end
  local saved = "saved " .. M.fmt_age(checkpoint.at, now)
  if type(val(checkpoint.runId)) == "string" and checkpoint.runId ~= "" then
    saved = saved .. " by run " .. checkpoint.runId
  end
  table.insert(details, saved)
  return "step " .. scalar(checkpoint.step) .. " (" .. table.concat(details, ", ") .. ")"
end

--- `90 steps (4 min)`, or `4 min` when the steps are not known (`steps` null).
function M.lost_amount(lost)
  local steps = val(lost.steps)
  local span = M.fmt_span(lost.seconds)
  if type(steps) == "number" and steps == math.floor(steps) then
    return scalar(steps) .. (steps == 1 and " step" or " steps") .. " (" .. span .. ")"
  end
  return span
end

--- 1012: the job trained all its steps; the question offers a fresh start.
function M.finished_prompt(job_id, run, now)
  run = is_table(run) and run or {}
  local steps = val(run.totalSteps) or val(run.step)
  local what = steps and ("trained all " .. scalar(steps) .. " steps") or "trained all its steps"
  local by = type(val(run.runId)) == "string" and (" in run " .. run.runId) or ""
  return job_id .. " is finished: it " .. what .. by .. " (ended " .. M.fmt_when(val(run.endedAt), now)
    .. "). Start over from step 0? [y/N] "
end

--- 1011: the step asked for against the job's last checkpoint, with its age.
function M.mismatch_prompt(job_id, data, now)
  local asked = scalar(data.asked)
  local last = val(data.lastCheckpoint)
  local resumes = is_table(last) and (" A plain start resumes from step " .. scalar(last.step) .. ".") or ""
  return "You asked to start " .. job_id .. " at step " .. asked .. ", but its last checkpoint is "
    .. M.checkpoint_words(last, now) .. "." .. resumes .. " Start at step " .. asked .. " anyway? [y/N] "
end

--- 1007 with an old checkpoint: how much stopping now loses; nil without `lost`.
function M.old_checkpoint_stop_prompt(data, now)
  if not (is_table(data.lost) and is_table(data.lastCheckpoint)) then
    return nil
  end
  return "This run's last checkpoint is " .. M.checkpoint_words(data.lastCheckpoint, now)
    .. "; stopping it now loses " .. M.lost_amount(data.lost) .. " of training. Stop anyway? [y/N] "
end

local STOP_VERBS = { kill = "killed", battery = "stopped on battery" }

--- `killed at step 390; last checkpoint 300: 90 steps (4 min) lost` from a stopped run's
--- `lost`; nil when the run says nothing of it (null or absent).
function M.lost_line(run)
  if not is_table(run) or not is_table(run.lost) then
    return nil
  end
  local verb = STOP_VERBS[val(run.stoppedBy) or ""] or "stopped"
  local last = is_table(run.lastCheckpoint) and val(run.lastCheckpoint.step) or nil
  local where = val(run.step) ~= nil and (verb .. " at step " .. scalar(run.step)) or verb
  if val(run.lost.steps) == 0 then
    return where .. "; nothing lost" .. (last ~= nil and (" (checkpoint at step " .. scalar(last) .. ")") or "")
  end
  local since = last ~= nil and ("last checkpoint " .. scalar(last)) or "no checkpoint"
  return where .. "; " .. since .. ": " .. M.lost_amount(run.lost) .. " lost"
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
