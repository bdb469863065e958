"""One module per rule code; ``arena_ls.gates.registry`` maps the codes to them."""
