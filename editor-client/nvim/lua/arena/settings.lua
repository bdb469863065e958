-- arena.nvim: the plugin's options (setup{}), the server's settings it sends,
-- and where a workspace's manifest is. The server's own defaults come from
-- arena.server_defaults, which `python -m arena_ls.settings_schema --write`
-- generates from arena_ls/settings.py (the one place settings are declared).

local server_defaults = require("arena.server_defaults")
local util = require("arena.util")

local val = util.val

local M = {}

--- The options of require("arena").setup{} and their defaults.
M.defaults = {
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

--- The options in force. One table for the plugin's life: apply() refills it, so that
--- require("arena").config and every module see the same one.
M.config = vim.deepcopy(M.defaults)

--- Takes setup{}'s options (the defaults for what they leave out).
function M.apply(opts)
  local merged = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  if opts and opts.settings then
    merged.settings = opts.settings -- replace, so that a user's lists stay lists
  end
  for key in pairs(M.config) do
    M.config[key] = nil
  end
  for key, value in pairs(merged) do
    M.config[key] = value
  end
  return M.config
end

--- The manifest path relative to a workspace root (setting `manifest`, else the server's default).
function M.manifest_relpath()
  local manifest = val((M.config.settings or {}).manifest)
  if type(manifest) == "string" and manifest ~= "" then
    return (manifest:gsub("^%./", ""))
  end
  return server_defaults["manifest"]
end

--- The nearest directory at or above `path` holding the manifest, or nil.
function M.find_root(path)
  if path == nil or path == "" then
    path = vim.loop.cwd()
  end
  path = vim.fn.fnamemodify(path, ":p")
  local dir = vim.fn.isdirectory(path) == 1 and path or vim.fn.fnamemodify(path, ":h")
  dir = dir:gsub("/+$", "")
  if dir == "" then
    dir = "/"
  end
  local relpath = M.manifest_relpath()
  if relpath:sub(1, 1) == "/" then
    return util.exists(relpath) and dir or nil
  end
  while true do
    if util.exists(util.path_join(dir, relpath)) then
      return dir
    end
    local parent = vim.fn.fnamemodify(dir, ":h")
    if parent == dir then
      return nil
    end
    dir = parent
  end
end

--- The settings sent to the server, as the user gave them (an empty table as a JSON object).
function M.server_settings()
  local settings = M.config.settings or {}
  if next(settings) == nil then
    return vim.empty_dict()
  end
  return settings
end

return M
