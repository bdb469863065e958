-- arena.nvim: the actions that bring a trainer under arena-ls (contract 8.1).
-- The quick fixes ("Add arena-ls's callback", "Add the trainer kit beside this
-- script", "Resume from --resume_from_checkpoint") come with the other fixes
-- of :lua vim.lsp.buf.code_action(); the source action "Add this trainer to
-- the manifest" is asked for by its kind, from :ArenaAddToManifest.
local M = {}

M.ADD_TO_MANIFEST = "source.arena.addToManifest"

--- The argument of vim.lsp.buf.code_action() that asks for the source action alone.
--- Neovim 0.8 and later take {context, apply}; 0.7 takes the context itself.
function M.add_to_manifest_options(modern)
  local context = { diagnostics = {}, only = { M.ADD_TO_MANIFEST } }
  if modern then
    return { context = context, apply = true }
  end
  return context
end

function M.add_to_manifest()
  vim.lsp.buf.code_action(M.add_to_manifest_options(vim.fn.has("nvim-0.8") == 1))
end

return M
