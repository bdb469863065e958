-- arena.nvim: the statusline's words for a run, and a log line's prefix
-- (contract 6.2, 6.3). Pure: RunInfo tables in, text out, no editor state,
-- so tests/editor/nvim_unit.lua checks every text without a server.

local util = require("arena.util")

local val, is_number = util.val, util.is_number

local M = {}

--- Marks of `RunInfo.insights` by severity (contract section 6.3).
local INSIGHT_SYMBOLS = { warning = "⚠", info = "ℹ" }

local ICONS = {
  starting = "⟳",
  running = "⟳",
  restarting = "↻",
  stopping = "■",
  stopped = "■",
  succeeded = "✓",
  crashed = "✗",
  lost = "?",
}

local LIVE = { starting = true, running = true, stopping = true, restarting = true }

--- `45s`, `3m`, `1h05m`.
function M.format_eta(seconds)
  seconds = val(seconds)
  if not is_number(seconds) or seconds < 0 then
    return nil
  end
  local whole = math.floor(seconds + 0.5)
  if whole < 60 then
    return string.format("%ds", whole)
  end
  local minutes = math.floor(whole / 60 + 0.5)
  if minutes < 60 then
    return string.format("%dm", minutes)
  end
  return string.format("%dh%02dm", math.floor(minutes / 60), minutes % 60)
end

function M.format_loss(loss)
  loss = val(loss)
  if type(loss) ~= "number" then
    return nil
  end
  if loss ~= loss then
    return "nan"
  end
  if loss == math.huge or loss == -math.huge then
    return loss > 0 and "inf" or "-inf"
  end
  if math.abs(loss) >= 100 then
    return string.format("%.0f", loss)
  end
  return string.format("%.2f", loss)
end

function M.percent(run)
  local step, total = val(run.step), val(run.totalSteps)
  if not is_number(step) or not is_number(total) or total <= 0 then
    return nil
  end
  return math.max(0, math.min(100, math.floor(step / total * 100)))
end

function M.is_live(run)
  return run ~= nil and LIVE[val(run.status)] == true
end

--- The run's well-formed insights, in the server's order.
function M.insights_of(run)
  local found = {}
  local listed = type(run) == "table" and val(run.insights) or nil
  if type(listed) ~= "table" then
    return found
  end
  for _, insight in ipairs(listed) do
    if type(insight) == "table" and type(val(insight.kind)) == "string" and insight.kind ~= "" then
      table.insert(found, insight)
    end
  end
  return found
end

local function insight_symbol(insight)
  return INSIGHT_SYMBOLS[val(insight.severity)] or INSIGHT_SYMBOLS.warning
end

--- `⚠ loss-spike`, `⚠ loss-spike +2` when more hold (the first warning is named, else the
--- first insight), `ℹ edited-during-run` for an information only; nil when none holds.
function M.format_insights(run)
  local insights = M.insights_of(run)
  if #insights == 0 then
    return nil
  end
  local lead = insights[1]
  for _, insight in ipairs(insights) do
    if val(insight.severity) == "warning" then
      lead = insight
      break
    end
  end
  local more = #insights > 1 and (" +" .. (#insights - 1)) or ""
  return insight_symbol(lead) .. " " .. lead.kind .. more
end

--- One line per insight with what to do: `⚠ loss-spike (since 20:14:21 UTC): message`.
function M.insight_lines(run)
  local lines = {}
  for _, insight in ipairs(M.insights_of(run)) do
    local since = val(insight.since)
    local time = type(since) == "string" and (since:match("T(%d%d:%d%d:%d%d)") or since) or nil
    local when = time and (" (since " .. time .. (since:match("T%d") and " UTC" or "") .. ")") or ""
    table.insert(lines, string.format("%s %s%s: %s", insight_symbol(insight), insight.kind, when, tostring(val(insight.message) or "")))
  end
  return lines
end

--- `JobInfo.probe` in a few words: `probe passed (3000 MB)`, `probe failed`; nil when never probed.
function M.probe_text(probe)
  probe = val(probe)
  if type(probe) ~= "table" or type(val(probe.ok)) ~= "boolean" then
    return nil
  end
  local peak = val(probe.peakVramMb)
  local text = "probe " .. (probe.ok and "passed" or "failed")
  if is_number(peak) then
    text = text .. string.format(" (%d MB)", math.floor(peak + 0.5))
  end
  return text
end

--- The message shown when a probe's verdict arrives.
function M.verdict_message(job_id, probe)
  local why = val(probe.message)
  return job_id .. " " .. M.probe_text(probe) .. ((type(why) == "string" and why ~= "") and (": " .. why) or "")
end

--- The question asked on refusal 1010: why, and whether to run the probe now.
function M.probe_prompt(job_id, err)
  local data = type(val(err.data)) == "table" and err.data or {}
  local probe = val(data.probe)
  local why = "no probe of its current trainer"
  if type(probe) == "table" then
    local message = val(probe.message)
    why = "its last probe failed" .. ((type(message) == "string" and message ~= "") and (": " .. message) or "")
  end
  return job_id .. " needs a passing VRAM probe before it runs (" .. why .. "). Run the probe now? [y/N] "
end

--- The job, and where it runs when that is a cluster: `tiny-lm @ lab` (contract 6.2).
function M.run_place(run)
  local job = tostring(val(run.jobId) or "?")
  local cluster = val(run.cluster)
  local name = type(cluster) == "table" and val(cluster.name) or nil
  if type(name) == "string" and name ~= "" then
    return job .. " @ " .. name
  end
  return job
end

--- `⟳ tiny-lm 45% loss 2.31 ETA 3m ⚠ loss-spike` for a RunInfo table (`tiny-lm @ lab` on a cluster).
function M.format_run(run)
  if type(run) ~= "table" then
    return ""
  end
  local status = val(run.status) or "?"
  local parts = { ICONS[status] or "?", M.run_place(run) }
  if status ~= "running" then
    table.insert(parts, status)
  end
  local percent = M.percent(run)
  if percent then
    table.insert(parts, percent .. "%")
  elseif is_number(val(run.step)) then
    table.insert(parts, "step " .. val(run.step))
  end
  local loss = M.format_loss(run.loss)
  if loss then
    table.insert(parts, "loss " .. loss)
  end
  local eta = M.is_live(run) and M.format_eta(run.etaSeconds) or nil
  if eta then
    table.insert(parts, "ETA " .. eta)
  end
  if val(run.stalled) == true then
    table.insert(parts, "stalled")
  end
  local insights = M.format_insights(run)
  if insights then
    table.insert(parts, insights)
  end
  return table.concat(parts, " ")
end

function M.format_log_line(line)
  local stream = val(line.stream)
  local text = tostring(val(line.text) or "")
  if stream == "stderr" then
    return "[stderr] " .. text
  elseif stream == "arena" then
    return "[arena] " .. text
  end
  return text
end

return M
