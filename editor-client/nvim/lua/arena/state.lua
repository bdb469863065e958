-- arena.nvim: everything the plugin knows of the server's runs and jobs, one
-- table shared by its modules (require("arena").state is the same table).

local util = require("arena.util")

local val = util.val

local M = {}

--- Everything the plugin knows; read by the statusline and by tests.
M.state = {
  clients = {}, -- root_dir -> client id
  pending = {}, -- client id -> functions waiting for `initialized`
  run = nil, -- the RunInfo the statusline shows
  runs = {}, -- runId -> latest RunInfo
  logs = {}, -- runId -> { lines = {LogLine...}, seqs = {seq = true} }
  log_buf = nil, -- the :ArenaLogs buffer
  log_follow = nil, -- { runId = ..., shown = <last seq written> }
  status_win = nil, -- the :ArenaStatus window
  jobs = {}, -- job ids from the last arena/status, for completion
  train_jobs = {}, -- job id -> true for the train jobs among them (:ArenaProbe completion)
  probes = {}, -- job id -> JobInfo.probe from the last arena/status (false: none)
  pending_probes = {}, -- runId of a probe run -> { job = id, before = verdict or nil }
}

--- Keeps what an `arena/status` result says: the jobs (for completion), their probes, the runs.
function M.remember_status(status)
  local state = M.state
  state.jobs = {}
  state.train_jobs = {}
  for _, job in ipairs(val(status.jobs) or {}) do
    table.insert(state.jobs, job.id)
    state.train_jobs[job.id] = val(job.kind) == "train" or nil
    state.probes[job.id] = val(job.probe) or false
  end
  for _, run in ipairs(val(status.runs) or {}) do
    state.runs[run.runId] = run
  end
  local active = val(status.active)
  if active then
    state.runs[active.runId] = active
    state.run = active
  end
end

return M
