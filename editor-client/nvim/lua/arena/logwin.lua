-- arena.nvim: the log window (:ArenaLogs, :ArenaRawLines). Keeps each run's
-- `arena/log` lines (arena.logstore), fetches a run's whole log (`arena/logs`,
-- every page) before showing live lines, and writes what the followed run's
-- buffer does not show yet.

local client = require("arena.client")
local logstore = require("arena.logstore")
local settings = require("arena.settings")
local runstate = require("arena.state")
local util = require("arena.util")

local val, notify, request = util.val, client.notify, client.request

local state = runstate.state

local M = {}

--- Adds a run's log lines to what is kept of it (arena.logstore: each seq once, in order).
function M.store_log_lines(run_id, lines)
  local store = state.logs[run_id]
  if not store then
    store = logstore.new()
    state.logs[run_id] = store
  end
  logstore.add(store, lines)
end

client.handlers["arena/log"] = function(_, params)
  if type(params) ~= "table" or val(params.runId) == nil then
    return
  end
  M.store_log_lines(params.runId, val(params.lines))
  vim.schedule(M.render_logs)
end

--- :ArenaRawLines: show or hide the trainer's `@arena` lines in the log window (from the next lines on).
function M.toggle_raw_lines()
  settings.config.show_raw_lines = not settings.config.show_raw_lines
  notify(settings.config.show_raw_lines and "showing @arena lines" or "hiding @arena lines")
end

--- Writes the followed run's lines that the logs buffer does not show yet.
function M.render_logs()
  local buf, follow = state.log_buf, state.log_follow
  if not (buf and follow and vim.api.nvim_buf_is_valid(buf)) or follow.backfilling then
    return
  end
  local store = state.logs[follow.runId]
  if not store then
    return
  end
  local fresh
  fresh, follow.shown = logstore.unshown(store, follow.shown, settings.config.show_raw_lines)
  if #fresh == 0 then
    return
  end
  vim.bo[buf].modifiable = true
  local first_empty = vim.api.nvim_buf_line_count(buf) == 1 and vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ""
  vim.api.nvim_buf_set_lines(buf, first_empty and 0 or -1, -1, false, fresh)
  vim.bo[buf].modifiable = false
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(buf), 0 })
  end
end

--- Makes the logs buffer follow `run_id`: a header, its whole log (fetched), then live lines.
function M.follow_logs(run_id)
  local buf = state.log_buf
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return
  end
  -- Live lines wait until the whole log so far has been fetched, so that older
  -- lines are never skipped for newer ones already shown.
  local follow = { runId = run_id, shown = -math.huge, backfilling = true }
  state.log_follow = follow
  local run = state.runs[run_id] or {}
  vim.schedule(function()
    vim.bo[buf].modifiable = true
    local header = "── " .. tostring(val(run.jobId) or "run") .. " (run " .. run_id .. ") ──"
    local first_empty = vim.api.nvim_buf_line_count(buf) == 1 and vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ""
    vim.api.nvim_buf_set_lines(buf, first_empty and 0 or -1, -1, false, { header })
    vim.bo[buf].modifiable = false
  end)
  local function fetch(cursor, pages)
    local params = { runId = run_id }
    if cursor ~= nil then
      params.cursor = cursor
    end
    request("arena/logs", params, function(err, result)
      local lines = (not err and type(result) == "table") and (val(result.lines) or {}) or {}
      M.store_log_lines(run_id, lines)
      if #lines > 0 and not val(result.done) and pages < 200 then
        fetch(val(result.cursor), pages + 1)
        return
      end
      if err then
        notify("arena/logs failed: " .. tostring(err.message), vim.log.levels.WARN)
      end
      follow.backfilling = false
      M.render_logs()
    end)
  end
  fetch(nil, 1)
end

--- :ArenaLogs [runId]: a scratch buffer following the run's `arena/log` lines.
function M.logs(run_id)
  local buf = state.log_buf
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    buf = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(buf, "arena://logs")
    vim.bo[buf].buftype = "nofile"
    vim.bo[buf].bufhidden = "hide"
    vim.bo[buf].swapfile = false
    vim.bo[buf].modifiable = false
    vim.bo[buf].filetype = "arena-log"
    state.log_buf = buf
  end
  if #vim.fn.win_findbuf(buf) == 0 then
    vim.cmd("botright split")
    vim.api.nvim_win_set_buf(0, buf)
  end
  if run_id and run_id ~= "" then
    M.follow_logs(run_id)
    return
  end
  request("arena/status", vim.empty_dict(), function(err, status)
    if err then
      notify("arena/status failed: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    runstate.remember_status(status)
    local runs = val(status.runs) or {}
    local run = val(status.active) or runs[#runs]
    if not run then
      notify("no run has logs yet; this buffer follows the next one")
      state.log_follow = { runId = "", shown = -math.huge }
      return
    end
    M.follow_logs(run.runId)
  end)
end

return M
