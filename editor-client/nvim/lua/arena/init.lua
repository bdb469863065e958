-- arena.nvim: a thin Neovim client of the arena-ls language server.
--
-- Starts `arena-ls` for a workspace that has `training/manifest.json`, and
-- offers :ArenaRun, :ArenaStop, :ArenaStatus, :ArenaLogs, :ArenaProbe and a
-- statusline component fed by `arena/statusChanged` (with the run's insights). Works on Neovim 0.7 and later:
-- `vim.lsp.start` is used where it exists, `vim.lsp.start_client` elsewhere.
-- Progress (`$/progress`) and diagnostics are left to Neovim's own handlers.

local M = {}

local uv = vim.loop
local worklost = require("arena.worklost")

local REFUSAL = {
  [1001] = "not-allowlisted",
  [1002] = "approval-required",
  [1003] = "already-running",
  [1004] = "gates-failed",
  [1005] = "preflight-failed",
  [1006] = "invalid-manifest",
  [1007] = "no-checkpoint",
  [1008] = "disabled",
  [1009] = "launch-failed",
  [1010] = "probe-required",
  [1011] = "checkpoint-mismatch",
  [1012] = "already-finished",
}

--- Marks of `RunInfo.insights` by severity (contract section 6.3).
local INSIGHT_SYMBOLS = { warning = "⚠", info = "ℹ" }

--- The job id of a job's probe runs is `<id>.probe`.
local PROBE_SUFFIX = ".probe"
--- After a probe run ends, `arena/status` is read this often (ms), this many times, for its verdict.
local VERDICT_POLL_MS = 250
local VERDICT_POLLS = 40

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

--- Lines kept per run for :ArenaLogs (older ones stay in the server's log).
local MAX_LOG_LINES = 10000

local defaults = {
  cmd = { "python3", "-m", "arena_ls" },
  -- The server's settings (contract section 5), sent as initializationOptions
  -- and as the `arena` section of workspace/configuration.
  settings = {},
  -- Filetypes whose buffers attach the server (the manifest attaches by name).
  filetypes = { "python" },
  -- Start the server when such a buffer opens inside a workspace with a manifest.
  autostart = true,
  -- Show the trainer's own `@arena {...}` lines in the log window (:ArenaRawLines toggles it).
  show_raw_lines = false,
}

M.config = vim.deepcopy(defaults)

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

-- Small helpers ------------------------------------------------------------

--- Nulls arrive as missing keys on 0.7 and as vim.NIL elsewhere: treat both as nil.
local function val(value)
  if value == vim.NIL then
    return nil
  end
  return value
end

local function notify(message, level)
  vim.notify("Arena: " .. message, level or vim.log.levels.INFO)
end

local function is_number(value)
  return type(value) == "number" and value == value and value ~= math.huge and value ~= -math.huge
end

local function path_join(...)
  return table.concat({ ... }, "/")
end

local function exists(path)
  return uv.fs_stat(path) ~= nil
end

--- The manifest path relative to a workspace root (setting `manifest`).
local function manifest_relpath()
  local manifest = val(M.config.settings.manifest)
  if type(manifest) == "string" and manifest ~= "" then
    return (manifest:gsub("^%./", ""))
  end
  return "training/manifest.json"
end

-- Formatting (pure functions, also used by the tests) -----------------------

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

--- The statusline component: the active (or last) run, or "".
function M.statusline()
  return M.format_run(M.state.run)
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

local function mb(value)
  if not is_number(value) then
    return "?"
  end
  if value >= 1024 then
    return string.format("%.1f GB", value / 1024)
  end
  return string.format("%d MB", math.floor(value + 0.5))
end

--- Why a job cannot run: one "CODE: message" per blocking diagnostic.
local function blocked_list(job)
  local reasons = {}
  for _, item in ipairs(val(job.blockedBy) or {}) do
    local code = val(item.code)
    table.insert(reasons, (code and (code .. ": ") or "") .. tostring(val(item.message) or ""))
  end
  if #reasons == 0 then
    table.insert(reasons, val(job.status) == "disabled" and "disabled in the manifest" or "not runnable")
  end
  return reasons
end

local function blocked_reasons(job)
  return table.concat(blocked_list(job), "; ")
end

--- The short form for a picker line: the codes only ("AR004, AR007"), else the reason.
local function blocked_summary(job)
  local codes = {}
  for _, item in ipairs(val(job.blockedBy) or {}) do
    if val(item.code) then
      table.insert(codes, item.code)
    end
  end
  if #codes > 0 then
    return table.concat(codes, ", ")
  end
  return blocked_reasons(job)
end

local function run_details(run)
  local details = { "run " .. tostring(val(run.runId)) }
  local step, total = val(run.step), val(run.totalSteps)
  if is_number(step) then
    table.insert(details, is_number(total) and string.format("step %d/%d", step, total) or ("step " .. step))
  end
  if is_number(val(run.stepsPerSecond)) then
    table.insert(details, string.format("%.1f it/s", run.stepsPerSecond))
  end
  local checkpoint = val(run.lastCheckpoint)
  if checkpoint then
    table.insert(details, "checkpoint at step " .. tostring(val(checkpoint.step)))
  elseif M.is_live(run) then
    table.insert(details, "no checkpoint yet")
  end
  local failure = val(run.failure)
  if failure then
    table.insert(details, "failure: " .. tostring(val(failure.kind)))
  end
  return table.concat(details, ", ")
end

local function counted(value, noun)
  value = val(value)
  return string.format("%s %s%s", value == nil and "?" or tostring(value), noun, value == 1 and "" or "s")
end

--- A cluster's health line (`health.clusters`, contract 6.2): `Cluster lab: 1 node, 2 CPUs, 1 GPU
--- (A100)`, its error, or that Ray has not been asked yet.
function M.cluster_health_line(cluster)
  local head = "Cluster " .. tostring(val(cluster.name)) .. ": "
  local err = val(cluster.error)
  if err then
    return head .. "error: " .. tostring(err)
  end
  if val(cluster.nodes) == nil then
    return head .. "not sampled yet"
  end
  local text = head .. table.concat({ counted(cluster.nodes, "node"), counted(cluster.cpus, "CPU"), counted(cluster.gpus, "GPU") }, ", ")
  local names = val(cluster.gpuNames) or {}
  if #names > 0 then
    text = text .. " (" .. table.concat(names, ", ") .. ")"
  end
  return text
end

function M.health_lines(health)
  health = val(health)
  if type(health) ~= "table" then
    return { "health: unknown" }
  end
  local lines = {}
  local ram = val(health.ram)
  if ram then
    table.insert(lines, string.format("RAM: %s free of %s (%s%% used)", mb(ram.availableMb), mb(ram.totalMb), tostring(ram.percent)))
  end
  local cpu = val(health.cpu)
  if cpu then
    table.insert(lines, string.format("CPU: %s%% of %s cores", tostring(cpu.percent), tostring(cpu.count)))
  end
  local battery = val(health.battery)
  if battery then
    local power = val(battery.pluggedIn) and "plugged in" or "on battery"
    table.insert(lines, string.format("Battery: %s%%, %s", tostring(battery.percent), power))
  else
    table.insert(lines, "Battery: none")
  end
  local gpus = val(health.gpus) or {}
  if #gpus == 0 then
    local why = val(health.gpuError)
    table.insert(lines, "GPUs: none" .. (why and (" (" .. why .. ")") or ""))
  end
  for _, gpu in ipairs(gpus) do
    local parts = { string.format("GPU %s: %s", tostring(gpu.index), tostring(gpu.name)) }
    if is_number(val(gpu.utilization)) then
      table.insert(parts, gpu.utilization .. "% busy")
    end
    if is_number(val(gpu.memoryUsedMb)) and is_number(val(gpu.memoryTotalMb)) then
      table.insert(parts, mb(gpu.memoryUsedMb) .. " / " .. mb(gpu.memoryTotalMb))
    end
    if is_number(val(gpu.temperature)) then
      table.insert(parts, gpu.temperature .. "°C")
    end
    table.insert(lines, table.concat(parts, ", "))
  end
  for _, cluster in ipairs(val(health.clusters) or {}) do
    table.insert(lines, M.cluster_health_line(cluster))
  end
  return lines
end

--- The lines of the :ArenaStatus window for an `arena/status` result.
function M.status_lines(status)
  local lines = {}
  local active = val(status.active)
  if active then
    table.insert(lines, "Active run: " .. M.format_run(active))
    table.insert(lines, "  " .. run_details(active))
    for _, line in ipairs(M.insight_lines(active)) do
      table.insert(lines, "  " .. line)
    end
  else
    table.insert(lines, "Active run: none")
  end
  table.insert(lines, "")
  table.insert(lines, "Jobs:")
  local jobs = val(status.jobs) or {}
  if #jobs == 0 then
    table.insert(lines, "  (none)")
  end
  for _, job in ipairs(jobs) do
    local kind = val(job.kind) or "task"
    local probe = M.probe_text(job.probe)
    local probed = probe and (" · " .. probe) or ""
    if val(job.runnable) then
      table.insert(lines, string.format("  ▶ %s (%s) %s%s", job.id, kind, val(job.status) or "ready", probed))
    else
      table.insert(lines, string.format("  ⊘ %s (%s)%s blocked:", job.id, kind, probed))
      for _, reason in ipairs(blocked_list(job)) do
        table.insert(lines, "      " .. reason)
      end
    end
  end
  local runs = val(status.runs) or {}
  if #runs > 0 then
    table.insert(lines, "")
    table.insert(lines, "Recent runs:")
    for index = math.max(1, #runs - 4), #runs do
      table.insert(lines, "  " .. M.format_run(runs[index]) .. "  [" .. tostring(val(runs[index].runId)) .. "]")
    end
  end
  table.insert(lines, "")
  table.insert(lines, "Health:")
  for _, line in ipairs(M.health_lines(status.health)) do
    table.insert(lines, "  " .. line)
  end
  return lines
end

--- "N minutes" of training a stop would lose, never "0 minutes".
local function minutes_lost(seconds)
  seconds = val(seconds)
  if not is_number(seconds) or seconds < 0 then
    return "all of its training"
  end
  local minutes = math.max(1, math.floor(seconds / 60 + 0.5))
  return minutes == 1 and "1 minute of training" or (minutes .. " minutes of training")
end

--- The human part of a refusal, from the fields its `data` carries.
function M.refusal_detail(err)
  local data = type(val(err.data)) == "table" and err.data or {}
  local code = err.code
  if code == 1001 and type(val(data.known)) == "table" then
    return (err.message or "") .. " (known jobs: " .. table.concat(data.known, ", ") .. ")"
  elseif code == 1003 and type(val(data.active)) == "table" then
    return tostring(val(data.active.jobId)) .. " is " .. tostring(val(data.active.status) or "running") .. "; one run at a time"
  elseif (code == 1004 or code == 1006) and type(val(data.diagnostics)) == "table" and #data.diagnostics > 0 then
    local found = {}
    for index, item in ipairs(data.diagnostics) do
      if index > 3 then
        table.insert(found, "and " .. (#data.diagnostics - 3) .. " more")
        break
      end
      table.insert(found, (val(item.code) and (item.code .. " ") or "") .. tostring(val(item.message)))
    end
    return table.concat(found, "; ")
  elseif code == 1005 and type(val(data.checks)) == "table" then
    local failing = {}
    for _, check in ipairs(data.checks) do
      if val(check.ok) == false then
        table.insert(failing, tostring(val(check.name)) .. ": " .. tostring(val(check.message)))
      end
    end
    if #failing > 0 then
      return table.concat(failing, "; ")
    end
  end
  return tostring(err.message or "refused")
end

--- The message shown for a refusal nobody can overrule from the editor.
function M.refusal_message(what, err)
  local data = type(val(err.data)) == "table" and err.data or {}
  local reason = val(data.reason) or REFUSAL[err.code]
  return string.format("cannot %s%s: %s", what, reason and (" (" .. reason .. ")") or "", M.refusal_detail(err))
end

M.stop_prompt = function(runtime_seconds)
  return "This run has no checkpoint yet; stopping loses " .. minutes_lost(runtime_seconds) .. ". Stop anyway? [y/N] "
end

-- Roots and clients --------------------------------------------------------

--- The nearest directory at or above `path` holding the manifest, or nil.
function M.find_root(path)
  if path == nil or path == "" then
    path = uv.cwd()
  end
  path = vim.fn.fnamemodify(path, ":p")
  local dir = vim.fn.isdirectory(path) == 1 and path or vim.fn.fnamemodify(path, ":h")
  dir = dir:gsub("/+$", "")
  if dir == "" then
    dir = "/"
  end
  local relpath = manifest_relpath()
  if relpath:sub(1, 1) == "/" then
    return exists(relpath) and dir or nil
  end
  while true do
    if exists(path_join(dir, relpath)) then
      return dir
    end
    local parent = vim.fn.fnamemodify(dir, ":h")
    if parent == dir then
      return nil
    end
    dir = parent
  end
end

-- Client methods became colon methods in 0.11 (the dot forms are deprecated there).
local HAS_CLIENT_METHODS = vim.fn.has("nvim-0.11") == 1

local function client_is_stopped(client)
  if HAS_CLIENT_METHODS then
    return client:is_stopped()
  end
  return client.is_stopped()
end

local function client_request(client, method, params, handler)
  if HAS_CLIENT_METHODS then
    return client:request(method, params, handler)
  end
  return client.request(method, params, handler)
end

local function is_file_buffer(bufnr)
  return vim.api.nvim_buf_is_valid(bufnr) and vim.bo[bufnr].buftype == "" and vim.api.nvim_buf_get_name(bufnr) ~= ""
end

local function live_client(id)
  local client = id and vim.lsp.get_client_by_id(id)
  if client and not client_is_stopped(client) then
    return client
  end
  return nil
end

local function server_settings()
  local settings = M.config.settings or {}
  if next(settings) == nil then
    return vim.empty_dict()
  end
  return settings
end

--- Notification handlers (Neovim calls them as handler(err, result, ctx, config)).
M.handlers = {}

M.handlers["arena/statusChanged"] = function(_, run)
  if type(run) ~= "table" or val(run.runId) == nil then
    return
  end
  M.state.runs[run.runId] = run
  local shown = M.state.run
  if not M.is_live(shown) or shown.runId == run.runId or M.is_live(run) then
    M.state.run = run
  end
  M.follow_probe(run)
  if M.state.log_follow and M.is_live(run) and M.state.log_follow.runId ~= run.runId and not M.is_live(M.state.runs[M.state.log_follow.runId]) then
    M.follow_logs(run.runId)
  end
  vim.schedule(function()
    pcall(vim.cmd, "redrawstatus!")
    pcall(vim.cmd, "doautocmd <nomodeline> User ArenaStatusChanged")
    if M.state.status_win and vim.api.nvim_win_is_valid(M.state.status_win) then
      M.status({ refresh_only = true })
    end
  end)
end

local function store_log_lines(run_id, lines)
  local store = M.state.logs[run_id]
  if not store then
    store = { lines = {}, seqs = {} }
    M.state.logs[run_id] = store
  end
  local added, unordered = false, false
  for _, line in ipairs(lines or {}) do
    local seq = val(line.seq)
    if seq ~= nil and not store.seqs[seq] then
      local last = store.lines[#store.lines]
      unordered = unordered or (last ~= nil and seq < last.seq)
      store.seqs[seq] = true
      table.insert(store.lines, line)
      added = true
    end
  end
  if added then
    if unordered then -- a backfill that overlaps live lines
      table.sort(store.lines, function(a, b)
        return a.seq < b.seq
      end)
    end
    local excess = #store.lines - MAX_LOG_LINES
    if excess > 0 then
      for index = 1, excess do
        store.seqs[store.lines[index].seq] = nil
      end
      store.lines = vim.list_slice(store.lines, excess + 1)
    end
  end
end

M.handlers["arena/log"] = function(_, params)
  if type(params) ~= "table" or val(params.runId) == nil then
    return
  end
  store_log_lines(params.runId, val(params.lines))
  vim.schedule(M.render_logs)
end

--- Lines of a dying server's stderr shown with its exit message.
local STDERR_TAIL_LINES = 6
--- How long after the exit the log is read: the last stderr chunk may land after the exit callback.
local STDERR_SETTLE_MS = 250

local UNESCAPE = { n = "\n", t = "\t", r = "\r", a = "\a", b = "\b", f = "\f", v = "\v" }

--- A Lua string literal as `vim.inspect` writes it ("..." or '...'), decoded.
function M.unquote(literal)
  local body = literal:sub(2, -2)
  local out, index = {}, 1
  while index <= #body do
    local char = body:sub(index, index)
    if char == "\\" then
      local digits = body:match("^%d%d?%d?", index + 1)
      if digits then
        table.insert(out, string.char(math.min(tonumber(digits), 255)))
        index = index + 1 + #digits
      else
        local escaped = body:sub(index + 1, index + 1)
        table.insert(out, UNESCAPE[escaped] or escaped)
        index = index + 2
      end
    else
      table.insert(out, char)
      index = index + 1
    end
  end
  return table.concat(out)
end

--- The last `max_lines` non-empty lines `program` wrote to stderr, read from Neovim's LSP
--- log after byte `offset`. Neovim logs every chunk of a server's stderr there (at ERROR
--- level, which the default log level keeps); nothing else gives a client the server's stderr.
function M.stderr_tail(log_path, offset, program, max_lines)
  local file = log_path and io.open(log_path, "rb")
  if not file then
    return {}
  end
  file:seek("set", offset or 0)
  local text = file:read("*a") or ""
  file:close()
  local chunks = {}
  local quoted_program = vim.inspect(program)
  for entry in text:gmatch("[^\n]+") do
    if entry:find('"stderr"', 1, true) and entry:find(quoted_program, 1, true) then
      local literal = entry:match("\"stderr\"%s+([\"'].*[\"'])%s*$")
      if literal then
        table.insert(chunks, M.unquote(literal))
      end
    end
  end
  local lines = {}
  for line in table.concat(chunks):gmatch("[^\r\n]+") do
    if line:match("%S") then
      table.insert(lines, line)
    end
  end
  return vim.list_slice(lines, math.max(1, #lines - max_lines + 1))
end

local function log_size(path)
  local size = path and vim.fn.getfsize(path) or -1
  return size > 0 and size or 0
end

--- The exit message: the code, and the server's last stderr lines (the cause, such as
--- `No module named arena_ls`, is there, not in the code).
function M.exit_message(code, signal, stderr_lines)
  local message = string.format("arena-ls exited with code %s (signal %s)", tostring(code), tostring(signal))
  if #stderr_lines == 0 then
    return message .. "; see :LspLog"
  end
  return message .. ". Its last lines on stderr:\n  " .. table.concat(stderr_lines, "\n  ")
end

local function client_config(root)
  local settings = server_settings()
  local log_path = vim.lsp.get_log_path and vim.lsp.get_log_path() or nil
  local log_offset = log_size(log_path)
  local program = M.config.cmd[1]
  return {
    name = "arena",
    cmd = M.config.cmd,
    root_dir = root,
    init_options = settings,
    settings = { arena = settings },
    handlers = M.handlers,
    on_init = function(client)
      local waiting = M.state.pending[client.id] or {}
      M.state.pending[client.id] = nil
      for _, action in ipairs(waiting) do
        vim.schedule(function()
          action(client)
        end)
      end
    end,
    on_exit = function(code, signal, client_id)
      M.state.pending[client_id] = nil
      for key, id in pairs(M.state.clients) do
        if id == client_id then
          M.state.clients[key] = nil
        end
      end
      if code ~= 0 then
        vim.defer_fn(function()
          local tail = M.stderr_tail(log_path, log_offset, program, STDERR_TAIL_LINES)
          notify(M.exit_message(code, signal, tail), vim.log.levels.WARN)
        end, STDERR_SETTLE_MS)
      end
    end,
  }
end

local function launch(root, bufnr)
  local config = client_config(root)
  local attach = is_file_buffer(bufnr)
  if vim.lsp.start and (attach or not vim.lsp.start_client) then
    -- `attach = false` is understood from 0.11 on; earlier ones attach only file buffers here.
    return vim.lsp.start(config, { bufnr = bufnr, attach = attach })
  end
  local id = vim.lsp.start_client(config)
  if id and attach then
    vim.lsp.buf_attach_client(bufnr, id)
  end
  return id
end

--- The client of the workspace holding `bufnr` (started if needed), or nil.
function M.ensure_client(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local name = vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_get_name(bufnr) or ""
  local root = M.find_root(name ~= "" and name or uv.cwd())
  if not root then
    return nil
  end
  local id = M.state.clients[root]
  if live_client(id) then
    if is_file_buffer(bufnr) and not vim.lsp.buf_is_attached(bufnr, id) then
      vim.lsp.buf_attach_client(bufnr, id)
    end
    return id
  end
  id = launch(root, bufnr)
  M.state.clients[root] = id
  return id
end

--- Runs `action(client)` once the client of the current workspace is initialized.
local function with_client(action)
  local id = M.ensure_client(0)
  if not id then
    -- No manifest above this buffer: fall back to any running arena client.
    for _, candidate in pairs(M.state.clients) do
      if live_client(candidate) then
        id = candidate
        break
      end
    end
  end
  local client = live_client(id)
  if not client then
    notify("no " .. manifest_relpath() .. " above " .. (vim.api.nvim_buf_get_name(0) ~= "" and vim.api.nvim_buf_get_name(0) or uv.cwd()), vim.log.levels.ERROR)
    return
  end
  if client.initialized then
    action(client)
  else
    M.state.pending[id] = M.state.pending[id] or {}
    table.insert(M.state.pending[id], action)
  end
end

local function request(method, params, on_result)
  with_client(function(client)
    client_request(client, method, params, function(err, result)
      on_result(err, result, client)
    end)
  end)
end

local function confirm(prompt, on_yes)
  vim.ui.input({ prompt = prompt }, function(answer)
    if answer and answer:match("^%s*[yY]") then
      on_yes()
    end
  end)
end

-- Commands -------------------------------------------------------------------

local function remember_status(status)
  M.state.jobs = {}
  M.state.train_jobs = {}
  for _, job in ipairs(val(status.jobs) or {}) do
    table.insert(M.state.jobs, job.id)
    M.state.train_jobs[job.id] = val(job.kind) == "train" or nil
    M.state.probes[job.id] = val(job.probe) or false
  end
  for _, run in ipairs(val(status.runs) or {}) do
    M.state.runs[run.runId] = run
  end
  local active = val(status.active)
  if active then
    M.state.runs[active.runId] = active
    M.state.run = active
  end
end

--- The question a refused start puts to the person when it would overwrite work (1012, 1011,
--- contract 7.1), and the params of its retry; nil for any other refusal.
function M.overwrite_question(id, params, err, now)
  local data = type(val(err.data)) == "table" and err.data or {}
  if err.code == 1012 and params.resume ~= false then
    local retry = vim.deepcopy(params)
    retry.resume, retry.startStep = false, nil
    return worklost.finished_prompt(id, data.run, now), retry
  end
  if err.code == 1011 and params.confirm ~= true then
    local retry = vim.deepcopy(params)
    retry.confirm = true
    return worklost.mismatch_prompt(id, data, now), retry
  end
  return nil
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
      local question, retry = M.overwrite_question(id, params, err, os.time())
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
        confirm(M.probe_prompt(id, err), function()
          M.probe(id, approved)
        end)
      else
        notify(M.refusal_message("start " .. id, err), vim.log.levels.ERROR)
      end
      return
    end
    M.handlers["arena/statusChanged"](nil, run)
    notify("started " .. id .. " (run " .. tostring(val(run.runId)) .. ")")
  end)
end

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
          local probe = M.probe_text(item.probe)
          return "▶ " .. item.id .. " (" .. (val(item.kind) or "task") .. ")" .. (probe and (" · " .. probe) or "")
        end
        return "⊘ " .. item.id .. " blocked: " .. blocked_summary(item)
      end,
    }, function(choice)
      if not choice then
        return
      end
      if not val(choice.runnable) then
        notify(choice.id .. " cannot run: " .. blocked_reasons(choice), vim.log.levels.ERROR)
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
      probe = M.state.probes[job_id] or nil
    end
    local fresh = type(probe) == "table"
      and (type(before) ~= "table" or val(probe.at) ~= val(before.at) or val(probe.ok) ~= val(before.ok))
    if fresh then
      M.state.last_verdict = { job = job_id, probe = probe }
      notify(M.verdict_message(job_id, probe), probe.ok and vim.log.levels.INFO or vim.log.levels.WARN)
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
  local pending = M.state.pending_probes[run.runId]
  if not pending or M.is_live(run) then
    return
  end
  M.state.pending_probes[run.runId] = nil
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
    local before = M.state.probes[id] or nil
    request("arena/start", params, function(err, run)
      if err then
        if err.code == 1002 and not approved then
          confirm("Probe " .. id .. "? It needs approval. [y/N] ", function()
            M.probe(id, true)
          end)
        else
          notify(M.refusal_message("probe " .. id, err), vim.log.levels.ERROR)
        end
        return
      end
      M.state.pending_probes[run.runId] = { job = id, before = before }
      notify("probing " .. id .. " (run " .. tostring(val(run.runId)) .. ")")
      local known = M.state.runs[run.runId]
      if known and not M.is_live(known) then
        -- A statusChanged said the probe ended before this answer came.
        M.follow_probe(known)
      else
        M.handlers["arena/statusChanged"](nil, run)
      end
    end)
  end)
end

--- Train job ids for :ArenaProbe completion (from the last arena/status).
function M.complete_probe_jobs(prefix)
  local found = {}
  for _, id in ipairs(M.complete_jobs(prefix)) do
    if M.state.train_jobs[id] then
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
        local prompt = worklost.old_checkpoint_stop_prompt(data, os.time()) or M.stop_prompt(data.runtimeSeconds)
        confirm(prompt, function()
          M.stop({ kill = opts.kill, confirm = true })
        end)
      else
        notify(M.refusal_message("stop the run", err), vim.log.levels.ERROR)
      end
      return
    end
    if type(result) == "table" and val(result.runId) then
      M.handlers["arena/statusChanged"](nil, result)
      local lost = worklost.lost_line(result)
      notify(tostring(val(result.jobId)) .. " " .. tostring(val(result.status)) .. (lost and (": " .. lost) or ""))
    else
      notify("nothing is running")
    end
  end)
end

--- The floating window's size for these lines: as wide as the widest (within
--- the screen), as high as the lines once wrapped.
local function float_size(lines)
  local width = 20
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line))
  end
  width = math.min(width + 2, math.max(20, vim.o.columns - 4))
  local height = 0
  for _, line in ipairs(lines) do
    height = height + math.max(1, math.ceil(vim.fn.strdisplaywidth(line) / width))
  end
  return width, math.min(height, math.max(1, vim.o.lines - 4))
end

local function open_float(lines)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = "arena-status"
  local width, height = float_size(lines)
  local win = vim.api.nvim_open_win(buf, true, {
    relative = "editor",
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2)),
    style = "minimal",
    border = "rounded",
  })
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  for _, key in ipairs({ "q", "<Esc>" }) do
    vim.api.nvim_buf_set_keymap(buf, "n", key, "<cmd>close<CR>", { nowait = true, noremap = true, silent = true })
  end
  return win, buf
end

--- :ArenaStatus: a floating window with the jobs, the active run and the machine's health.
function M.status(opts)
  opts = opts or {}
  request("arena/status", vim.empty_dict(), function(err, status)
    if err then
      notify("arena/status failed: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    remember_status(status)
    local lines = M.status_lines(status)
    M.state.status_lines = lines
    local win = M.state.status_win
    if win and vim.api.nvim_win_is_valid(win) then
      local buf = vim.api.nvim_win_get_buf(win)
      vim.bo[buf].modifiable = true
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
      vim.bo[buf].modifiable = false
      local width, height = float_size(lines)
      vim.api.nvim_win_set_width(win, width)
      vim.api.nvim_win_set_height(win, height)
      return
    end
    if not opts.refresh_only then
      M.state.status_win = open_float(lines)
    end
  end)
end

--- Writes the followed run's lines that the logs buffer does not show yet.
--- :ArenaRawLines: show or hide the trainer's `@arena` lines in the log window (from the next lines on).
function M.toggle_raw_lines()
  M.config.show_raw_lines = not M.config.show_raw_lines
  notify(M.config.show_raw_lines and "showing @arena lines" or "hiding @arena lines")
end

function M.render_logs()
  local buf, follow = M.state.log_buf, M.state.log_follow
  if not (buf and follow and vim.api.nvim_buf_is_valid(buf)) or follow.backfilling then
    return
  end
  local store = M.state.logs[follow.runId]
  if not store then
    return
  end
  local fresh = {}
  for _, line in ipairs(store.lines) do
    if line.seq > follow.shown then
      if M.config.show_raw_lines or not worklost.is_announcement(line) then
        table.insert(fresh, M.format_log_line(line))
      end
      follow.shown = line.seq
    end
  end
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
  local buf = M.state.log_buf
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return
  end
  -- Live lines wait until the whole log so far has been fetched, so that older
  -- lines are never skipped for newer ones already shown.
  local follow = { runId = run_id, shown = -math.huge, backfilling = true }
  M.state.log_follow = follow
  local run = M.state.runs[run_id] or {}
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
      store_log_lines(run_id, lines)
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
  local buf = M.state.log_buf
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    buf = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(buf, "arena://logs")
    vim.bo[buf].buftype = "nofile"
    vim.bo[buf].bufhidden = "hide"
    vim.bo[buf].swapfile = false
    vim.bo[buf].modifiable = false
    vim.bo[buf].filetype = "arena-log"
    M.state.log_buf = buf
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
    remember_status(status)
    local runs = val(status.runs) or {}
    local run = val(status.active) or runs[#runs]
    if not run then
      notify("no run has logs yet; this buffer follows the next one")
      M.state.log_follow = { runId = "", shown = -math.huge }
      return
    end
    M.follow_logs(run.runId)
  end)
end

--- Job ids for :ArenaRun completion (from the last arena/status).
function M.complete_jobs(prefix)
  local found = {}
  for _, id in ipairs(M.state.jobs) do
    if vim.startswith(id, prefix or "") then
      table.insert(found, id)
    end
  end
  return found
end

-- Setup ----------------------------------------------------------------------

local function attach_if_workspace(bufnr)
  if M.config.autostart and is_file_buffer(bufnr) and M.find_root(vim.api.nvim_buf_get_name(bufnr)) then
    M.ensure_client(bufnr)
  end
end

--- require('arena').setup({cmd = {...}, settings = {...}, filetypes = {...}, autostart = true})
function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(defaults), opts or {})
  if opts and opts.settings then
    M.config.settings = opts.settings -- replace, so that a user's lists stay lists
  end
  local group = vim.api.nvim_create_augroup("arena", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args)
      attach_if_workspace(args.buf)
    end,
  })
  local manifest_name = vim.fn.fnamemodify(manifest_relpath(), ":t")
  vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile" }, {
    group = group,
    pattern = "*/" .. manifest_name,
    callback = function(args)
      attach_if_workspace(args.buf)
    end,
  })
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and (vim.tbl_contains(M.config.filetypes, vim.bo[bufnr].filetype)) then
      attach_if_workspace(bufnr)
    end
  end
  M.configured = true
end

return M
