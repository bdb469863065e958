-- End-to-end session of arena.nvim against a real arena-ls, driven by
-- tests/editor/test_nvim.py. It reads its configuration from the JSON file
-- named by $ARENA_E2E_CONFIG, acts like a user (commands, picker, prompts),
-- waits for each expected event with vim.wait and a deadline, and writes
-- what it saw to the results file as JSON. pytest asserts on that file.
-- Any Lua error is caught (a Lua error inside luafile would leave nvim
-- hanging), recorded, and ends nvim with `cquit 1`.

local config = vim.json.decode(table.concat(vim.fn.readfile(os.getenv("ARENA_E2E_CONFIG")), "\n"))
local results = { checks = {}, order = {}, notifications = {}, progress = {}, prompts = {} }

local function save()
  vim.fn.writefile({ vim.json.encode(results) }, config.results)
end

local function check(name, ok, detail)
  results.checks[name] = { ok = ok == true, detail = detail }
  table.insert(results.order, name)
  save()
end

--- Waits for `condition` (polled every 50 ms) up to `ms`; records the outcome; fails on timeout.
local function wait_for(name, ms, condition, describe)
  local ok = vim.wait(ms, function()
    local good, value = pcall(condition)
    return good and value
  end, 50)
  check(name, ok, describe and describe() or nil)
  if not ok then
    error("timed out after " .. ms .. " ms waiting for: " .. name, 0)
  end
end

--- Waits until the server has judged every trainer (no job `gatesPending`, issue 39): a status
--- never waits for the gates, and a job still being checked is listed as blocked until then.
local function wait_judged(arena)
  local latest, pending = nil, false
  wait_for("every trainer judged", 120000, function()
    local id = arena.state.clients and arena.state.clients[config.workspace]
    local client = id and vim.lsp.get_client_by_id(id)
    if pending or not client then
      return false
    end
    if latest ~= nil then
      for _, job in ipairs(latest.jobs or {}) do
        if job.gatesPending == true then
          latest = nil
          break
        end
      end
      if latest ~= nil then
        return true
      end
    end
    pending = true
    local function on_status(_, result)
      latest, pending = result, false
    end
    if vim.fn.has("nvim-0.11") == 1 then
      client:request("arena/status", vim.empty_dict(), on_status)
    else
      client.request("arena/status", vim.empty_dict(), on_status)
    end
    return false
  end)
end

--- Loads the plugin, records what the user would see, and answers prompts the
--- way a user would: the picker picks config.ready_job, vim.ui.input answers
--- from config.answers in turn (then "y").
local function load_plugin()
  vim.cmd("filetype on") -- -u NONE leaves it off; every real configuration has it
  vim.opt.runtimepath:prepend(config.plugin_dir)
  vim.cmd("runtime plugin/arena.lua")
  local arena = require("arena")

  -- Record what the user would see, and answer the prompts the way a user would.
  local original_notify = vim.notify
  vim.notify = function(message, level, opts)
    table.insert(results.notifications, { message = message, level = level })
    return original_notify(message, level, opts)
  end
  vim.ui.select = function(items, opts, on_choice)
    local picker_items = {}
    results.picker = picker_items
    local chosen = nil
    for index, item in ipairs(items) do
      table.insert(picker_items, { id = item.id, runnable = item.runnable, label = opts.format_item(item) })
      if item.id == config.ready_job then
        chosen = index
      end
    end
    on_choice(chosen and items[chosen] or nil, chosen)
  end
  local answers = config.answers or {}
  vim.ui.input = function(opts, on_confirm)
    table.insert(results.prompts, opts.prompt)
    save()
    on_confirm(answers[#results.prompts] or "y")
  end
  vim.api.nvim_create_autocmd("User", {
    pattern = { "LspProgressUpdate", "LspProgress" },
    callback = function()
      if vim.lsp.util.get_progress_messages then
        for _, message in ipairs(vim.lsp.util.get_progress_messages()) do
          table.insert(results.progress, { title = message.title, percentage = message.percentage, message = message.message })
        end
      end
    end,
  })
  pcall(vim.api.nvim_create_autocmd, "LspProgress", {
    callback = function(event)
      local value = event.data and event.data.params and event.data.params.value or {}
      table.insert(results.progress, { title = value.title, percentage = value.percentage, message = value.message })
    end,
  })

  arena.setup({ cmd = config.cmd, settings = config.settings })
  vim.cmd("cd " .. vim.fn.fnameescape(config.workspace))

  -- Opening the manifest starts the server for this workspace.
  vim.cmd("edit " .. vim.fn.fnameescape(config.workspace .. "/training/manifest.json"))
  check("root detected", arena.find_root(vim.api.nvim_buf_get_name(0)) == config.workspace, arena.find_root(vim.api.nvim_buf_get_name(0)))
  return arena
end

local function prepare()
  local arena = load_plugin()
  wait_for("server initialized", 60000, function()
    local id = arena.state.clients[config.workspace]
    local client = id and vim.lsp.get_client_by_id(id)
    return client ~= nil and client.initialized == true
  end)
  return arena
end

--- Waits until the shown run is a live run of `job`; returns its run id.
local function wait_for_live_run(arena, name, job)
  local run_id = nil
  wait_for(name, 30000, function()
    local run = arena.state.run
    if run and run.jobId == job and arena.is_live(run) then
      run_id = run.runId
      return true
    end
    return false
  end, function()
    return vim.json.encode({ prompts = results.prompts, run = arena.state.run or {} })
  end)
  return run_id
end

local function wait_for_stopped(arena, name, run_id)
  wait_for(name, 60000, function()
    local run = arena.state.runs[run_id]
    return run ~= nil and run.status == "stopped"
  end, function()
    return vim.json.encode(arena.state.runs[run_id] or {})
  end)
end

--- Run through the picker, watch, follow logs, status window, stop, approval, diagnostics.
local function main_session(arena)
  -- The gates judge the trainers in the background (a status never waits for them, issue 38):
  -- the manifest's diagnostics come once every trainer it names is judged (AR108 names the one
  -- that fails); a picker opened before then lists a trainer still being checked as blocked.
  wait_for("the manifest's diagnostics", 60000, function()
    return #vim.diagnostic.get(vim.fn.bufnr(config.workspace .. "/training/manifest.json")) > 0
  end)
  -- 2. :ArenaRun with no job: the picker lists every job, blocked ones marked.
  vim.cmd("ArenaRun")
  wait_for("picker offered jobs", 30000, function()
    return results.picker ~= nil
  end)
  local run_id = wait_for_live_run(arena, "run started", config.ready_job)

  -- 3. The statusline shows the run's progress, from arena/statusChanged.
  wait_for("statusline shows progress", 60000, function()
    return arena.statusline():match("%d+%%") ~= nil
  end, function()
    return arena.statusline()
  end)
  results.statusline = arena.statusline()
  results.statusline_eval = vim.api.nvim_eval("v:lua.require'arena'.statusline()")

  -- 4. :ArenaLogs follows the run: stdout lines and marked stderr lines.
  vim.cmd("ArenaLogs")
  local function log_lines()
    local buf = arena.state.log_buf
    return buf and vim.api.nvim_buf_is_valid(buf) and vim.api.nvim_buf_get_lines(buf, 0, -1, false) or {}
  end
  wait_for("logs buffer follows the run", 30000, function()
    local has_stderr, has_stdout = false, false
    for _, line in ipairs(log_lines()) do
      has_stderr = has_stderr or line:match("^%[stderr%] fixture trainer started") ~= nil
      has_stdout = has_stdout or line:match("^step %d+/%d+ loss") ~= nil
    end
    return has_stderr and has_stdout
  end, function()
    return table.concat(vim.list_slice(log_lines(), 1, 8), "\n")
  end)
  local count_before = #log_lines()
  wait_for("logs buffer grows live", 30000, function()
    return #log_lines() > count_before
  end)
  results.raw_log_lines = {}
  for _, line in ipairs(log_lines()) do
    if line:match("^@arena {") then
      table.insert(results.raw_log_lines, line)
    end
  end
  vim.cmd("wincmd p")

  -- 5. :ArenaStatus opens a floating window with jobs, the active run and health.
  vim.cmd("ArenaStatus")
  wait_for("status window open", 30000, function()
    local win = arena.state.status_win
    return win ~= nil and vim.api.nvim_win_is_valid(win) and vim.api.nvim_win_get_config(win).relative ~= ""
  end)
  local status_buf = vim.api.nvim_win_get_buf(arena.state.status_win)
  results.status_window = vim.api.nvim_buf_get_lines(status_buf, 0, -1, false)
  local text = table.concat(results.status_window, "\n")
  local function has(needle)
    return text:find(needle, 1, true) ~= nil
  end
  check(
    "status window content",
    has("Active run: ⟳ " .. config.ready_job .. " ") and has("Jobs:") and has("RAM: ") and has("Battery: ") and has("GPU"),
    text
  )
  vim.api.nvim_win_close(arena.state.status_win, true)

  -- 6. :ArenaStop ends the run cooperatively; its status becomes `stopped`.
  vim.cmd("ArenaStop")
  wait_for_stopped(arena, "run stopped", run_id)
  results.stopped_run = arena.state.runs[run_id]
  results.statusline_after_stop = arena.statusline()

  -- 7. A job that needs approval: the prompt, "y", and the retry with approved = true.
  local prompts_before = #results.prompts
  vim.cmd("ArenaRun " .. config.approval_job)
  local approval_run = wait_for_live_run(arena, "approval-required run started after the prompt", config.approval_job)
  results.approval_prompt = results.prompts[prompts_before + 1]
  vim.cmd("ArenaStop")
  wait_for_stopped(arena, "approval-required run stopped", approval_run)

  -- 8. A failing trainer gets diagnostics with source "arena".
  vim.cmd("edit " .. vim.fn.fnameescape(config.failing_trainer))
  local trainer_buf = vim.api.nvim_get_current_buf()
  local function arena_diagnostics()
    local found = {}
    for _, diagnostic in ipairs(vim.diagnostic.get(trainer_buf)) do
      if diagnostic.source == "arena" then
        local code = diagnostic.code or (diagnostic.user_data and diagnostic.user_data.lsp and diagnostic.user_data.lsp.code)
        table.insert(found, { code = code, message = diagnostic.message, severity = diagnostic.severity, lnum = diagnostic.lnum })
      end
    end
    return found
  end
  wait_for("arena diagnostics on the failing trainer", 30000, function()
    return #arena_diagnostics() > 0
  end)
  results.diagnostics = arena_diagnostics()
end

--- A train run with no checkpoint: :ArenaStop asks; "n" leaves it running, "y" stops it.
local function confirm_stop_session(arena)
  wait_judged(arena)
  vim.cmd("ArenaRun " .. config.ready_job)
  local run_id = wait_for_live_run(arena, "train run started", config.ready_job)
  wait_for("train run reports progress", 60000, function()
    return arena.statusline():match("%d+%%") ~= nil
  end, function()
    return arena.statusline()
  end)
  local client = vim.lsp.get_client_by_id(arena.state.clients[config.workspace])
  local latest, pending = nil, false
  local function ask_status()
    latest, pending = nil, true
    local function on_status(_, result)
      latest, pending = result, false
    end
    if vim.fn.has("nvim-0.11") == 1 then
      client:request("arena/status", vim.empty_dict(), on_status)
    else
      client.request("arena/status", vim.empty_dict(), on_status)
    end
  end
  -- The trainer starts before its agent has loaded: on a loaded machine progress can show
  -- while the run is still "starting". Wait for "running", so the check below is exact.
  wait_for("the run is running", 60000, function()
    if pending then
      return false
    end
    if latest ~= nil and latest.active ~= nil and latest.active.status == "running" then
      return true
    end
    ask_status()
    return false
  end)
  vim.cmd("ArenaStop")
  wait_for("stop asked for confirmation", 30000, function()
    return #results.prompts >= 1
  end)
  -- The answer was "n": the refused stop changed nothing; the server still has the run active.
  ask_status()
  wait_for("status after the declined stop", 30000, function()
    return latest ~= nil
  end)
  local status = latest
  check("declined stop leaves the run running", status.active ~= nil and status.active.runId == run_id and status.active.status == "running", vim.json.encode(status.active or {}))
  vim.cmd("ArenaStop")
  wait_for("stop asked again", 30000, function()
    return #results.prompts >= 2
  end)
  wait_for_stopped(arena, "confirmed stop ended the run", run_id)
  results.stopped_run = arena.state.runs[run_id]
end

--- Notifications whose message contains `needle`.
local function notifications_with(needle)
  local found = {}
  for _, notification in ipairs(results.notifications) do
    if notification.message:find(needle, 1, true) then
      table.insert(found, notification.message)
    end
  end
  return found
end

--- :ArenaProbe runs the job's probe (a run of `<id>.probe`) and shows its verdict; a start of
--- a job whose probe is required and has not passed (1010) asks to probe, and "y" probes.
--- The probe's trainer lists itself on the fake GPU with config.probe_mb MB (over the limit).
local function probe_session(arena)
  local job = config.probe_job
  local verdict = job .. " probe failed (" .. config.probe_mb .. " MB)"
  vim.cmd("ArenaProbe " .. job)
  wait_for("the probe's verdict is shown", 90000, function()
    return #notifications_with(verdict) >= 1
  end, function()
    return vim.json.encode({ notifications = results.notifications, run = arena.state.run or {} })
  end)
  local probe_runs = {}
  for _, run in pairs(arena.state.runs) do
    if run.jobId == job .. ".probe" then
      table.insert(probe_runs, run)
    end
  end
  results.probe_runs = probe_runs
  results.verdicts = notifications_with(verdict)

  -- The start is refused with 1010; the prompt says why, and "y" runs the probe again.
  vim.cmd("ArenaRun " .. job)
  wait_for("1010 asks to run the probe", 30000, function()
    return #results.prompts >= 1
  end, function()
    return vim.json.encode(results.notifications)
  end)
  wait_for("the second probe's verdict is shown", 90000, function()
    return #notifications_with(verdict) >= 2
  end, function()
    return vim.json.encode({ notifications = results.notifications, run = arena.state.run or {} })
  end)
  results.verdicts = notifications_with(verdict)

  vim.cmd("ArenaStatus")
  wait_for("status window open", 30000, function()
    local win = arena.state.status_win
    return win ~= nil and vim.api.nvim_win_is_valid(win)
  end)
  results.status_window = vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(arena.state.status_win), 0, -1, false)
  vim.api.nvim_win_close(arena.state.status_win, true)
end

--- Whether `value` is a JSON null or absent (vim.NIL, or nil on Neovim 0.7).
local function missing(value)
  return value == nil or value == vim.NIL
end

--- The reference trainer with `runOn` (config.cluster), as the main session runs a job here:
--- :ArenaRun through the picker, progress in the statusline naming where it runs
--- (`JOB @ lab 12%`), :ArenaStop once a checkpoint is announced (stopped by Ray's SIGTERM,
--- the trainer saving first), :ArenaStatus with the cluster's health, then :ArenaRun again
--- (the server resumes from that checkpoint) to success, and :ArenaLogs of the resumed run.
local function cluster_session(arena)
  local job = config.ready_job
  local place = job .. " @ " .. config.cluster
  local function describe_run()
    return vim.json.encode({ statusline = arena.statusline(), run = arena.state.run or {}, notifications = results.notifications })
  end
  wait_judged(arena)
  vim.cmd("ArenaRun")
  wait_for("picker offered jobs", 30000, function()
    return results.picker ~= nil
  end)
  wait_for("statusline shows the cluster run's progress", config.deadline_ms, function()
    local run = arena.state.run
    local line = arena.statusline()
    return run ~= nil and run.jobId == job and line:find(place, 1, true) ~= nil and line:match("%d+%%") ~= nil
  end, describe_run)
  results.statusline = arena.statusline()
  local run_id = arena.state.run.runId
  wait_for("a checkpoint is announced", config.deadline_ms, function()
    local run = arena.state.runs[run_id]
    return run ~= nil and not missing(run.lastCheckpoint)
  end, describe_run)

  vim.cmd("ArenaStop")
  wait_for_stopped(arena, "the cluster run stopped", run_id)
  results.stopped_run = arena.state.runs[run_id]
  results.statusline_after_stop = arena.statusline()

  -- :ArenaStatus: the stopped run, and the cluster's health as Ray reports it (sampled in the
  -- background: a window opened before the first sample says so, and is opened again).
  local asked = false
  wait_for("status window shows the cluster's health", 60000, function()
    local win = arena.state.status_win
    if win ~= nil and vim.api.nvim_win_is_valid(win) then
      results.status_window = vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(win), 0, -1, false)
      if vim.tbl_contains(results.status_window, "  " .. config.cluster_health) then
        return true
      end
      vim.api.nvim_win_close(win, true)
      asked = false
    end
    if not asked then
      asked = true
      vim.cmd("ArenaStatus")
    end
    return false
  end, function()
    return table.concat(results.status_window or {}, "\n")
  end)
  vim.api.nvim_win_close(arena.state.status_win, true)

  vim.cmd("ArenaRun " .. job)
  local resumed_id = nil
  wait_for("the resumed run started", config.deadline_ms, function()
    local run = arena.state.run
    if run ~= nil and run.jobId == job and run.runId ~= run_id then
      resumed_id = run.runId
      return true
    end
    return false
  end, describe_run)
  wait_for("the resumed run ended", config.deadline_ms, function()
    local run = arena.state.runs[resumed_id]
    return run ~= nil and run.status ~= nil and not arena.is_live(run)
  end, describe_run)
  results.final_run = arena.state.runs[resumed_id]
  results.statusline_after = arena.statusline()
  vim.cmd("ArenaLogs " .. resumed_id)
  local function log_lines()
    local buf = arena.state.log_buf
    return buf and vim.api.nvim_buf_is_valid(buf) and vim.api.nvim_buf_get_lines(buf, 0, -1, false) or {}
  end
  wait_for("logs buffer shows the run's last line", 60000, function()
    for _, line in ipairs(log_lines()) do
      if line:match(config.last_line) then
        return true
      end
    end
    return false
  end, function()
    return table.concat(log_lines(), "\n")
  end)
  results.log_lines = log_lines()
end

--- The server cannot start (config.cmd names a module that is not there): the user is
--- told why, from the server's own stderr, not just its exit code.
local function dies_on_start_session()
  load_plugin()
  local exit_message = nil
  wait_for("the exit is reported", 60000, function()
    for _, notification in ipairs(results.notifications) do
      if notification.message:find("arena-ls exited with code", 1, true) then
        exit_message = notification.message
        return true
      end
    end
    return false
  end)
  results.exit_message = exit_message
end

local function session()
  if config.scenario == "dies-on-start" then
    dies_on_start_session()
    results.finished = true
    save()
    return
  end
  local arena = prepare()
  if config.scenario == "confirm-stop" then
    confirm_stop_session(arena)
  elseif config.scenario == "probe" then
    probe_session(arena)
  elseif config.scenario == "cluster" then
    cluster_session(arena)
  else
    main_session(arena)
  end
  results.finished = true
  save()
end

local ok, err = xpcall(session, debug.traceback)
if not ok then
  results.error = tostring(err)
  save()
  vim.cmd("cquit 1")
end
vim.cmd("qall!")
