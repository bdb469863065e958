"""The LSP layer: pygls server, params, errors, notifications and progress.

Handlers here only translate between the protocol and plain functions of
``arena_ls.lifecycle``, ``arena_ls.manifest``, ``arena_ls.gates`` and
``arena_ls.health``, which know nothing of LSP.
"""
