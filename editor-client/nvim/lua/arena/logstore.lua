-- arena.nvim: what is kept of a run's log, and which of its lines the log
-- window writes next. Pure: a store is a plain table `{ lines = {LogLine...},
-- seqs = {[seq] = true} }`, so tests/editor/nvim_unit.lua checks the order,
-- the duplicates and the trimming without a server.

local format = require("arena.format")
local util = require("arena.util")
local worklost = require("arena.worklost")

local val = util.val

local M = {}

--- Lines kept per run for :ArenaLogs (older ones stay in the server's log).
M.MAX_LINES = 10000

function M.new()
  return { lines = {}, seqs = {} }
end

--- Adds `lines` to `store`: each seq once, in seq order (a backfill may overlap live lines),
--- the last `max_lines` (M.MAX_LINES) only. Lines without a seq are dropped.
function M.add(store, lines, max_lines)
  max_lines = max_lines or M.MAX_LINES
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
  if not added then
    return
  end
  if unordered then
    table.sort(store.lines, function(a, b)
      return a.seq < b.seq
    end)
  end
  local excess = #store.lines - max_lines
  if excess > 0 then
    for index = 1, excess do
      store.seqs[store.lines[index].seq] = nil
    end
    store.lines = vim.list_slice(store.lines, excess + 1)
  end
end

--- The lines after seq `shown` as the window writes them (the trainer's `@arena` lines left
--- out unless `show_raw`), and the last seq they cover.
function M.unshown(store, shown, show_raw)
  local fresh, last = {}, shown
  for _, line in ipairs(store.lines) do
    if line.seq > last then
      if show_raw or not worklost.is_announcement(line) then
        table.insert(fresh, format.format_log_line(line))
      end
      last = line.seq
    end
  end
  return fresh, last
end

return M
