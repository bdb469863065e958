-- arena.nvim: the statusline component, fed by `arena/statusChanged`: which run
-- it shows, and what a status change moves along (a probe's verdict, the log
-- window, the status window, the `User ArenaStatusChanged` autocommand).

local client = require("arena.client")
local commands = require("arena.commands")
local format = require("arena.format")
local logwin = require("arena.logwin")
local state = require("arena.state").state
local statuswin = require("arena.statuswin")
local util = require("arena.util")

local M = {}

--- The statusline component: the active (or last) run, or "".
function M.statusline()
  return format.format_run(state.run)
end

--- Which run the statusline shows after `run` changed: a live run wins over a finished one.
local function show(run)
  local shown = state.run
  if not format.is_live(shown) or shown.runId == run.runId or format.is_live(run) then
    state.run = run
  end
end

--- The log window moves on to a run that starts while the one it follows is over.
local function log_window_moves_on(run)
  local follow = state.log_follow
  return follow ~= nil and format.is_live(run) and follow.runId ~= run.runId and not format.is_live(state.runs[follow.runId])
end

client.handlers["arena/statusChanged"] = function(_, run)
  if type(run) ~= "table" or util.val(run.runId) == nil then
    return
  end
  state.runs[run.runId] = run
  show(run)
  commands.follow_probe(run)
  if log_window_moves_on(run) then
    logwin.follow_logs(run.runId)
  end
  vim.schedule(function()
    pcall(vim.cmd, "redrawstatus!")
    pcall(vim.cmd, "doautocmd <nomodeline> User ArenaStatusChanged")
    if state.status_win and vim.api.nvim_win_is_valid(state.status_win) then
      statuswin.status({ refresh_only = true })
    end
  end)
end

return M
