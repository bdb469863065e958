-- arena.nvim: the decisions about runs that the glue acts on. Pure: tables
-- in, a choice out, so tests/editor/nvim_unit.lua checks each without a server.

local format = require("arena.format")
local util = require("arena.util")

local val = util.val

local M = {}

--- The run the statusline shows once `run` changed, when it showed `shown`: a live run wins
--- over a finished one, and a shown run's own update always replaces it.
function M.shown_after(shown, run)
  if not format.is_live(shown) or shown.runId == run.runId or format.is_live(run) then
    return run
  end
  return shown
end

--- Whether the log window, following `follow` (nil: none open), moves on to `run`: a run that
--- starts while the followed one (`followed_run`, its last RunInfo) is over.
function M.log_moves_on(follow, run, followed_run)
  return follow ~= nil and format.is_live(run) and follow.runId ~= run.runId and not format.is_live(followed_run)
end

--- Whether `probe` (JobInfo.probe now) is a new verdict after `before` (the one a probe
--- started from; nil when the job had none): another time or another outcome.
function M.is_new_verdict(probe, before)
  if type(probe) ~= "table" then
    return false
  end
  return type(before) ~= "table" or val(probe.at) ~= val(before.at) or val(probe.ok) ~= val(before.ok)
end

return M
