-- arena.nvim: the :ArenaStatus floating window (`q` or `<Esc>` closes it),
-- its lines from arena.status_view, refreshed in place while it is open.

local client = require("arena.client")
local format = require("arena.format")
local laptop = require("arena.laptop")
local runstate = require("arena.state")
local status_view = require("arena.status_view")
local util = require("arena.util")

local state = runstate.state

local M = {}

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

--- Why each run cannot keep the machine awake (run id -> reason), learned from its log lines;
--- the runs whose log is being asked for it (true), or how many times it was (a count).
local awake_reasons, awake_asked = {}, {}

local function learn_keep_awake_reason(run_id, lines)
  if run_id ~= nil and awake_reasons[run_id] == nil then
    awake_reasons[run_id] = laptop.keep_awake_reason(lines)
  end
end

--- The active run says `keepAwake` null and its reason is not known: read the first page of its
--- log (the agent's line comes as it starts), then show the window again; asked again at a later
--- refresh while the log is shorter than the page (the agent may not have decided yet).
local function ask_keep_awake_reason(active)
  local run_id = util.val(active.runId)
  local value = util.val(active.keepAwake)
  local asks = awake_asked[run_id]
  if not format.is_live(active) or type(value) == "boolean" or run_id == nil or awake_reasons[run_id] or asks == true then
    return
  end
  if (asks or 0) >= laptop.REASON_ASKS then
    return
  end
  awake_asked[run_id] = true
  client.request("arena/logs", { runId = run_id, limit = laptop.REASON_LOG_LINES }, function(err, page)
    if err or type(page) ~= "table" then
      return
    end
    learn_keep_awake_reason(run_id, page.lines)
    if awake_reasons[run_id] then
      M.status({ refresh_only = true })
    elseif #(util.val(page.lines) or {}) < laptop.REASON_LOG_LINES then
      awake_asked[run_id] = (asks or 0) + 1 -- the agent may not have decided yet (keepAwake is null until then): ask again later
    end
  end)
end

--- :ArenaStatus: a floating window with the jobs, the active run and the machine's health.
function M.status(opts)
  opts = opts or {}
  client.request("arena/status", vim.empty_dict(), function(err, status)
    if err then
      client.notify("arena/status failed: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    runstate.remember_status(status)
    local active = util.val(status.active)
    if type(active) == "table" then
      local known = state.logs[util.val(active.runId)]
      learn_keep_awake_reason(util.val(active.runId), known and known.lines)
      learn_keep_awake_reason(util.val(active.runId), status.logs)
      ask_keep_awake_reason(active)
    end
    local lines = status_view.status_lines(status, awake_reasons)
    state.status_lines = lines
    local win = state.status_win
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
      state.status_win = open_float(lines)
    end
  end)
end

return M
