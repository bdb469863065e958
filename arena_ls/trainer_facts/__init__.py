"""What a trainer script does, read from its AST: the facts the gates' rules judge.

One walk over the file (``facts``), its text and positions (``source``), the
values its names hold (``values``), its training loop (``loop``), what it
saves and how often (``checkpoints``, ``cadence``, ``periodic``), whether it
announces its saves (``announce``), its OOM retries (``oom``), its use of the
trainer kit (``kit``), and ``context``: everything one trainer's rules read,
computed once and shared. The rules themselves, their findings, quick fixes,
registry and cache are ``arena_ls.gates``, the floor above: nothing here
judges, makes a finding or imports a rule. Like the gates, it never imports
torch or the trainer.
"""
