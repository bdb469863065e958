-- Commands of arena.nvim. The server starts from require('arena').setup({...});
-- a command run before setup() uses the defaults.
if vim.g.loaded_arena then
  return
end
vim.g.loaded_arena = true

local function arena()
  local module = require("arena")
  if not module.configured then
    module.setup({})
  end
  return module
end

vim.api.nvim_create_user_command("ArenaRun", function(opts)
  arena().run(opts.args)
end, {
  nargs = "?",
  desc = "Run a job from training/manifest.json (pick one when no id is given)",
  complete = function(prefix)
    return arena().complete_jobs(prefix)
  end,
})

vim.api.nvim_create_user_command("ArenaProbe", function(opts)
  arena().probe(opts.args, false)
end, {
  nargs = 1,
  desc = "Run a train job's VRAM probe (its manifest probe.args); the verdict is shown when it ends",
  complete = function(prefix)
    return arena().complete_probe_jobs(prefix)
  end,
})

vim.api.nvim_create_user_command("ArenaStop", function(opts)
  arena().stop({ kill = opts.bang })
end, { nargs = 0, bang = true, desc = "Stop the active run (! kills it)" })

vim.api.nvim_create_user_command("ArenaResumeInterrupted", function()
  arena().resume_interrupted(false)
end, { nargs = 0, desc = "Resume a run a restart of the machine interrupted, from its checkpoint" })

vim.api.nvim_create_user_command("ArenaStatus", function()
  arena().status()
end, { nargs = 0, desc = "Show jobs, the active run and the machine's health" })

vim.api.nvim_create_user_command("ArenaLogs", function(opts)
  arena().logs(opts.args)
end, { nargs = "?", desc = "Follow a run's log in a scratch buffer" })

vim.api.nvim_create_user_command("ArenaAddToManifest", function()
  require("arena.adopt").add_to_manifest()
end, { nargs = 0, desc = "Add this buffer's trainer to training/manifest.json (a train job that resumes)" })

vim.api.nvim_create_user_command("ArenaRawLines", function()
  arena().toggle_raw_lines()
end, { nargs = 0, desc = "Show or hide the trainer's @arena lines in the log window" })
