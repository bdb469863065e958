-- arena.nvim: the statusline component, fed by `arena/statusChanged`: which run
-- it shows, and what a status change moves along (a probe's verdict, the log
-- window, the status window, the `User ArenaStatusChanged` autocommand).

local client = require("arena.client")
local commands = require("arena.commands")
local format = require("arena.format")
local logwin = require("arena.logwin")
local runs = require("arena.runs")
local state = require("arena.state").state
local statuswin = require("arena.statuswin")
local util = require("arena.util")

local M = {}

--- The statusline component: the active (or last) run, or "".
function M.statusline()
  return format.format_run(state.run)
end

client.handlers["arena/statusChanged"] = function(_, run)
  if type(run) ~= "table" or util.val(run.runId) == nil then
    return
  end
  state.runs[run.runId] = run
  state.run = runs.shown_after(state.run, run)
  commands.follow_probe(run)
  local follow = state.log_follow
  if runs.log_moves_on(follow, run, follow and state.runs[follow.runId]) then
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
