-- arena.nvim: why the server exited, in words. Neovim writes a server's
-- stderr only to its LSP log, so the last lines are read from there (the
-- part written since the plugin started that server). No editor state: the
-- log's path and offset are passed in.

local M = {}

--- Lines of a dying server's stderr shown with its exit message.
M.TAIL_LINES = 6
--- How long after the exit the log is read: the last stderr chunk may land after the exit callback.
M.SETTLE_MS = 250

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

--- The size of the file at `path` in bytes (0 when there is none).
function M.log_size(path)
  local stat = path and vim.loop.fs_stat(path)
  return stat and stat.size or 0
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

return M
