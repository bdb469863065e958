-- arena.nvim: the words for a refused request (contract section 4's error
-- codes), the no-checkpoint stop question, and the question a start that
-- would overwrite work puts to the person with the params of its retry
-- (1012, 1011; contract 7.1). Pure, like arena.format.

local util = require("arena.util")
local wording = require("arena.wording")
local worklost = require("arena.worklost")

local val = util.val

local M = {}

--- The reason of each refusal code, for a refusal whose `data.reason` is missing.
M.REFUSAL = wording.REASONS

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
  local reason = val(data.reason) or M.REFUSAL[err.code]
  return string.format("cannot %s%s: %s", what, reason and (" (" .. reason .. ")") or "", M.refusal_detail(err))
end

--- The 1007 question of a run with no checkpoint yet: its runtime (`3 s`, `12 min`) is what a stop loses.
function M.stop_prompt(runtime_seconds)
  return worklost.no_checkpoint_stop_prompt(runtime_seconds)
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

return M
