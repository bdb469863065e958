"""The agents' side of a run: what runs in a job agent (``python -m arena_ls.agent.launch``) and,
shared with it, in a cluster agent (``arena_ls.cluster.agent``).

A floor above ``run`` and ``health`` and below ``lifecycle`` (the server's side): an agent
reads and writes the run folder and reads the hardware; it never imports the server's
modules, and no LSP. The part that holds a trainer of this machine is ``agent.local``.

What other packages may use (``__all__``; ``tests/unit/test_layers.py`` holds every
import from outside to it):

- ``launch``: the job agent's entry point (the server spawns ``python -m`` it, and the spare);
- ``trainer_start``: the trainer's argv, environment, capture and first record (standard library only);
- ``pumps``, ``read_pacing``: the pumps that copy the trainer's pipes into the run's output, and
  their wait after a small read (standard library only);
- ``attempts``: the attempt loop both agents run, over a ``Trainer``;
- ``announcements``: what a checkpoint or a progress announcement changes in the run: the one
  ``Announcements`` handler both back ends' output uses;
- ``relaunch``, ``relaunch_gate``, ``failure``, ``watchdog``: the relaunch policy and its gate,
  the failure classes, the watchdog's rules;
- ``ckptverify``, ``rollback``, ``resume_args``, ``savedfiles``: checkpoints verified before a
  resume, the loss-spike rollback, ``resume.args`` filled in, files a run saved;
- ``statewriter``, ``reserve``: the one writer of ``state.json`` and the disk reserve that keeps
  its last write possible;
- ``power``, ``agent_power``, ``agent_laptop``, ``keep_awake``, ``notifier``, ``notify_events``:
  the battery rules, keeping the machine awake, the desktop notices;
- ``exec_check``, ``interpreter``: the gated files checked again before each exec, the
  interpreter's flags;
- ``stall``, ``stall_probe``, ``folderwatch``: the stall rules and their evidence, the watched
  folder;
- ``local``: the job agent proper and its local trainer (see its ``__init__``).

This ``__init__`` imports none of them: the launcher starts the trainer before the agent's
heavier imports.
"""

__all__ = [
    "agent_laptop",
    "agent_power",
    "announcements",
    "attempts",
    "ckptverify",
    "exec_check",
    "failure",
    "folderwatch",
    "interpreter",
    "keep_awake",
    "launch",
    "local",
    "notifier",
    "notify_events",
    "power",
    "pumps",
    "read_pacing",
    "relaunch",
    "relaunch_gate",
    "reserve",
    "resume_args",
    "rollback",
    "savedfiles",
    "stall",
    "stall_probe",
    "statewriter",
    "trainer_start",
    "watchdog",
]
