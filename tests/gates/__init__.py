"""Tests of the trainer gates (arena_ls.gates)."""
