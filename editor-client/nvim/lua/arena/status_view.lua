-- arena.nvim: the lines of the :ArenaStatus window (the active run, the jobs
-- and why a blocked one cannot run, recent runs, the machine's and the
-- clusters' health) for an `arena/status` result. Pure, like arena.format.

local format = require("arena.format")
local laptop = require("arena.laptop")
local util = require("arena.util")

local val, is_number = util.val, util.is_number

local function append_all(into, more)
  for _, item in ipairs(more) do
    table.insert(into, item)
  end
end

local M = {}

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
function M.blocked_list(job)
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

function M.blocked_reasons(job)
  return table.concat(M.blocked_list(job), "; ")
end

--- The short form for a picker line: the codes only ("AR004, AR007"), else the reason.
function M.blocked_summary(job)
  local codes = {}
  for _, item in ipairs(val(job.blockedBy) or {}) do
    if val(item.code) then
      table.insert(codes, item.code)
    end
  end
  if #codes > 0 then
    return table.concat(codes, ", ")
  end
  return M.blocked_reasons(job)
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
  elseif format.is_live(run) then
    table.insert(details, "no checkpoint yet")
  end
  local failure = val(run.failure)
  if failure then
    table.insert(details, "failure: " .. tostring(val(failure.kind)))
  end
  return table.concat(details, ", ")
end

--- `RunInfo.resumedFrom` (contract 8.2): which checkpoint a resume took, how it was verified,
--- and each newer one it skipped with why; no lines for a run that did not resume.
function M.resumed_lines(run)
  local resumed = val(run.resumedFrom)
  if type(resumed) ~= "table" then
    return {}
  end
  local lines = {
    string.format("resumed from step %s (%s), verified by %s", tostring(val(resumed.step)),
      tostring(val(resumed.path)), tostring(val(resumed.verified))),
  }
  for _, skipped in ipairs(val(resumed.skipped) or {}) do
    if type(skipped) == "table" then
      table.insert(lines, string.format("skipped step %s (%s): %s", tostring(val(skipped.step)),
        tostring(val(skipped.path)), tostring(val(skipped.why))))
    end
  end
  return lines
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

--- The lines of the :ArenaStatus window for an `arena/status` result; `keep_awake_reasons`
--- (run id -> why it cannot keep the machine awake, from its log) when known.
function M.status_lines(status, keep_awake_reasons)
  local lines = {}
  local active = val(status.active)
  if active then
    table.insert(lines, "Active run: " .. format.format_run(active))
    table.insert(lines, "  " .. run_details(active))
    for _, line in ipairs(M.resumed_lines(active)) do
      table.insert(lines, "  " .. line)
    end
    for _, line in ipairs(format.insight_lines(active)) do
      table.insert(lines, "  " .. line)
    end
    local awake = laptop.keep_awake_text(active, (keep_awake_reasons or {})[val(active.runId)])
    if awake then
      table.insert(lines, "  " .. awake)
    end
    for _, line in ipairs(laptop.record_lines(active.record)) do
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
    local probe = format.probe_text(job.probe)
    local probed = probe and (" · " .. probe) or ""
    if val(job.runnable) then
      table.insert(lines, string.format("  ▶ %s (%s) %s%s", job.id, kind, val(job.status) or "ready", probed))
    else
      table.insert(lines, string.format("  ⊘ %s (%s)%s blocked:", job.id, kind, probed))
      for _, reason in ipairs(M.blocked_list(job)) do
        table.insert(lines, "      " .. reason)
      end
    end
  end
  local runs = val(status.runs) or {}
  if #runs > 0 then
    table.insert(lines, "")
    table.insert(lines, "Recent runs:")
    for index = math.max(1, #runs - 4), #runs do
      table.insert(lines, "  " .. format.format_run(runs[index]) .. "  [" .. tostring(val(runs[index].runId)) .. "]")
    end
  end
  append_all(lines, laptop.offer_lines(runs))
  table.insert(lines, "")
  table.insert(lines, "Health:")
  for _, line in ipairs(M.health_lines(status.health)) do
    table.insert(lines, "  " .. line)
  end
  return lines
end

return M
