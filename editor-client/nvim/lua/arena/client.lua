-- arena.nvim: the LSP client. Starts `arena-ls` for a workspace (one client
-- per root holding the manifest), attaches buffers, holds the notification
-- handlers the other modules register (arena/statusChanged, arena/log), and
-- sends requests once the client is initialized. Works on Neovim 0.7 and
-- later: `vim.lsp.start` is used where it exists, `vim.lsp.start_client`
-- elsewhere.

local settings = require("arena.settings")
local state = require("arena.state").state
local stderr = require("arena.stderr")

local M = {}

--- A notification of the plugin ("Arena: ..."), INFO unless `level` says otherwise.
function M.notify(message, level)
  vim.notify("Arena: " .. message, level or vim.log.levels.INFO)
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

function M.is_file_buffer(bufnr)
  return vim.api.nvim_buf_is_valid(bufnr) and vim.bo[bufnr].buftype == "" and vim.api.nvim_buf_get_name(bufnr) ~= ""
end

local function live_client(id)
  local client = id and vim.lsp.get_client_by_id(id)
  if client and not client_is_stopped(client) then
    return client
  end
  return nil
end

--- Notification handlers (Neovim calls them as handler(err, result, ctx, config)).
M.handlers = {}
--- Called with the client once it is initialized (after the actions that waited for it).
M.init_hooks = {}

local function client_config(root)
  local server_settings = settings.server_settings()
  local log_path = vim.lsp.get_log_path and vim.lsp.get_log_path() or nil
  local log_offset = stderr.log_size(log_path)
  local program = settings.config.cmd[1]
  return {
    name = "arena",
    cmd = settings.config.cmd,
    root_dir = root,
    init_options = server_settings,
    settings = { arena = server_settings },
    handlers = M.handlers,
    on_init = function(client)
      local waiting = state.pending[client.id] or {}
      state.pending[client.id] = nil
      for _, action in ipairs(waiting) do
        vim.schedule(function()
          action(client)
        end)
      end
      for _, hook in ipairs(M.init_hooks) do
        vim.schedule(function()
          hook(client)
        end)
      end
    end,
    on_exit = function(code, signal, client_id)
      state.pending[client_id] = nil
      for key, id in pairs(state.clients) do
        if id == client_id then
          state.clients[key] = nil
        end
      end
      if code ~= 0 then
        vim.defer_fn(function()
          local tail = stderr.stderr_tail(log_path, log_offset, program, stderr.TAIL_LINES)
          M.notify(stderr.exit_message(code, signal, tail), vim.log.levels.WARN)
        end, stderr.SETTLE_MS)
      end
    end,
  }
end

local function launch(root, bufnr)
  local config = client_config(root)
  local attach = M.is_file_buffer(bufnr)
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
  local root = settings.find_root(name ~= "" and name or vim.loop.cwd())
  if not root then
    return nil
  end
  local id = state.clients[root]
  if live_client(id) then
    if M.is_file_buffer(bufnr) and not vim.lsp.buf_is_attached(bufnr, id) then
      vim.lsp.buf_attach_client(bufnr, id)
    end
    return id
  end
  id = launch(root, bufnr)
  state.clients[root] = id
  return id
end

--- Runs `action(client)` once the client of the current workspace is initialized.
function M.with_client(action)
  local id = M.ensure_client(0)
  if not id then
    -- No manifest above this buffer: fall back to any running arena client.
    for _, candidate in pairs(state.clients) do
      if live_client(candidate) then
        id = candidate
        break
      end
    end
  end
  local client = live_client(id)
  if not client then
    M.notify("no " .. settings.manifest_relpath() .. " above " .. (vim.api.nvim_buf_get_name(0) ~= "" and vim.api.nvim_buf_get_name(0) or vim.loop.cwd()), vim.log.levels.ERROR)
    return
  end
  if client.initialized then
    action(client)
  else
    state.pending[id] = state.pending[id] or {}
    table.insert(state.pending[id], action)
  end
end

--- Sends `method` to the current workspace's server; `on_result(err, result, client)` gets the answer.
function M.request(method, params, on_result)
  M.with_client(function(client)
    client_request(client, method, params, function(err, result)
      on_result(err, result, client)
    end)
  end)
end

return M
