"""``arena``, the terminal client: an LSP client of a child ``arena-ls``, like any editor."""
