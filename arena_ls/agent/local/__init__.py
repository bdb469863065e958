"""The job agent of a trainer on this machine: the agent proper and the local trainer it hands the
attempt loop (the cluster's counterpart is ``arena_ls.cluster``: ``agent``, ``ray_trainer``...).

What other packages may use (``__all__``):

- ``agent``: the job agent after the launcher (``launch`` hands it the started trainer);
- ``trainer``: ``LocalTrainer``, a local process tree as the attempt loop's ``Trainer``;
- ``stop``, ``output``, ``stall``: its stop protocol, its output and announcements, its stall watch.

This ``__init__`` imports none of them.
"""

__all__ = ["agent", "output", "stall", "stop", "trainer"]
