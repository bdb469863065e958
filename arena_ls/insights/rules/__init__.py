"""One module per insight kind; ``arena_ls.insights.registry`` lists them."""
