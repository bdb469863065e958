"""The server's side of a run: starting, following, stopping and re-adopting runs, and the views
the protocol layer shows of them.

The highest of the three process floors (``run < health < agent < lifecycle``): it runs in
the server only. It reads the run folder (``arena_ls.run``) and starts the job agent
(``arena_ls.agent.launch``, as ``python -m``), but holds no trainer's pipe; nothing below
imports it.

What other packages may use (``__all__``; ``tests/unit/test_layers.py`` holds every import
from outside to it):

- ``supervisor``: every run of a workspace (status, logs, re-adoption), with ``starter`` (a
  start: ``StartRequest``, ``DryRun``), ``stopper`` (a stop: ``StopRequest``) and
  ``after_restart`` (the resume after a restart of the machine) as its parts;
- ``backends``: the run back-end seam (``base``) and this machine's back end (``local``);
- ``runview``: a server's view of one run, rebuilt from its folder;
- ``follower``, ``follower_told``, ``state_watch``: the one follower of a server's runs, what it
  told of each (and the statuses a run passed through that no reading caught), its wake on a
  new state;
- ``records``, ``health_line``, ``metrics_page_reader``: one reader of a run's records, the
  trainer's health line, the pages of ``arena/metrics``;
- ``probe``, ``probe_id``, ``probe_service``: the VRAM probe, a variant of a start;
- ``spare``: the spare job agent, started while the workspace is idle;
- ``reboot``, ``runrecord``, ``lostwork``, ``gate_verdict``: a restart of the machine under a run,
  the run record, the work a stop lost, what the gates said of the bytes a start runs.

Its other modules (``history``, ``jobcheckpoint``, ``checkpoint_age``, ``progress_speed``,
``retention``, ``pruning``) serve the supervisor and the run views only.
"""

__all__ = [
    "after_restart",
    "backends",
    "follower",
    "follower_told",
    "gate_verdict",
    "health_line",
    "lostwork",
    "metrics_page_reader",
    "probe",
    "probe_id",
    "probe_service",
    "reboot",
    "records",
    "runrecord",
    "runview",
    "spare",
    "starter",
    "state_watch",
    "stopper",
    "supervisor",
]
