-- arena.nvim: a thin Neovim client of the arena-ls language server.
--
-- Starts `arena-ls` for a workspace that has `training/manifest.json`, and
-- offers :ArenaRun, :ArenaStop, :ArenaStatus, :ArenaLogs, :ArenaProbe and a
-- statusline component fed by `arena/statusChanged` (with the run's insights).
-- Works on Neovim 0.7 and later. Progress (`$/progress`) and diagnostics are
-- left to Neovim's own handlers.
--
-- This file is the entry point: setup{} and the public API, gathered from the
-- modules that do the work (docs/architecture.md, "The Neovim plugin"):
--   editor-free core (pure; tests/editor/nvim_unit.lua checks it without a server):
--     arena.format (statusline words), arena.status_view (the status window's lines),
--     arena.refusals (refusal words and retries), arena.runs (which run is shown, when
--     the log window moves on, a new probe verdict), arena.logstore (a run's kept log
--     lines), arena.worklost, arena.stderr
--   editor glue: arena.settings (options, roots), arena.state, arena.client (LSP),
--     arena.commands, arena.statusline, arena.logwin, arena.statuswin

local client = require("arena.client")
local commands = require("arena.commands")
local format = require("arena.format")
local laptop = require("arena.laptop")
local logwin = require("arena.logwin")
local refusals = require("arena.refusals")
local settings = require("arena.settings")
local state = require("arena.state")
local status_view = require("arena.status_view")
local statusline = require("arena.statusline")
local statuswin = require("arena.statuswin")
local stderr = require("arena.stderr")

local M = {}

--- The options in force (setup{} refills this table; it stays the same table).
M.config = settings.config
--- Everything the plugin knows; read by the statusline and by tests.
M.state = state.state
--- Notification handlers (Neovim calls them as handler(err, result, ctx, config)).
M.handlers = client.handlers

--- The public functions, by the module that holds them (the names are the API of 0.x: keep them).
local EXPORTS = {
  [format] = {
    "format_eta",
    "format_loss",
    "percent",
    "is_live",
    "insights_of",
    "format_insights",
    "insight_lines",
    "probe_text",
    "verdict_message",
    "probe_prompt",
    "run_place",
    "format_run",
    "format_log_line",
  },
  [status_view] = { "cluster_health_line", "health_lines", "status_lines" },
  [refusals] = { "refusal_detail", "refusal_message", "stop_prompt", "overwrite_question" },
  [stderr] = { "unquote", "stderr_tail", "exit_message" },
  [settings] = { "find_root" },
  [client] = { "ensure_client" },
  [statusline] = { "statusline" },
  [commands] = {
    "start",
    "run",
    "probe",
    "follow_probe",
    "stop",
    "complete_jobs",
    "complete_probe_jobs",
    "resume_interrupted",
  },
  [laptop] = { "reboot_offer", "reboot_offers", "commit_text", "record_lines", "offer_lines", "keep_awake_text", "keep_awake_reason" },
  [statuswin] = { "status" },
  [logwin] = { "toggle_raw_lines", "render_logs", "follow_logs", "logs" },
}

for module, names in pairs(EXPORTS) do
  for _, name in ipairs(names) do
    assert(type(module[name]) == "function", "arena: no function " .. name)
    M[name] = module[name]
  end
end

local function attach_if_workspace(bufnr)
  if M.config.autostart and client.is_file_buffer(bufnr) and settings.find_root(vim.api.nvim_buf_get_name(bufnr)) then
    client.ensure_client(bufnr)
  end
end

--- require('arena').setup({cmd = {...}, settings = {...}, filetypes = {...}, autostart = true})
function M.setup(opts)
  settings.apply(opts)
  local group = vim.api.nvim_create_augroup("arena", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args)
      attach_if_workspace(args.buf)
    end,
  })
  local manifest_name = vim.fn.fnamemodify(settings.manifest_relpath(), ":t")
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
