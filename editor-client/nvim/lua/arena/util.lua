-- arena.nvim: small helpers shared by the plugin's modules. Pure (exists reads
-- the file system, nothing of the editor).

local M = {}

--- Nulls arrive as missing keys on 0.7 and as vim.NIL elsewhere: treat both as nil.
function M.val(value)
  if value == vim.NIL then
    return nil
  end
  return value
end

--- A finite number (not NaN, not an infinity).
function M.is_number(value)
  return type(value) == "number" and value == value and value ~= math.huge and value ~= -math.huge
end

function M.path_join(...)
  return table.concat({ ... }, "/")
end

function M.exists(path)
  return vim.loop.fs_stat(path) ~= nil
end

return M
