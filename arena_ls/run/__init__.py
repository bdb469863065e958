"""The run folder on disk: the one format a server, a job agent and a cluster agent share.

The lowest of the three process floors (``run < health < agent < lifecycle``): it imports
no other package of ``arena_ls`` but the shared modules beneath it (``platform``,
``validation``), so each process reads and writes a run with the same code. Nothing
here starts or watches a process.

What other packages may use (``__all__``; ``tests/unit/test_layers.py`` holds every
import from outside to it):

- ``rundir``: a run's folder, its ``spec.json``, ``state.json`` and stop request;
- ``state_folder``: the workspace's state folder, its runs and each job's checkpoint record;
- ``runlock``: ``.runlock``, the one lock of a run's record, and its stale-lock rules;
- ``atomicfile``: a JSON file replaced whole (standard library only);
- ``claim``: the name of the agent's claim on a run (standard library only);
- ``states``: the state machine of a run (``RunStatus``, its moves);
- ``stop_marks``: a stop request said by empty files' names when the disk is full;
- ``outputlog``: the capture format, ``output.log`` and ``output.idx``, and its writer;
- ``capture``: reading the output back with cursors (``OutputReader``), with ``loglines`` (a
  line, cleaned), ``cursors`` (a position a client holds), ``capture_index`` (the records and
  segments, one at a time) and ``capture_records`` (whole-log iterators);
- ``logsegments``, ``logkeep``: the log's segments and what is kept when it is capped;
- ``trainer_announcements``, ``checkpoint_lines``: the trainer's announcements and the checkpoint lines;
- ``agent_records``: the typed ``arena`` records an agent writes and their one renderer;
- ``late_imports``: the lock of the imports an agent makes while its pumps copy the output.

Modules import these as submodules (``from arena_ls.run.rundir import RunDir``); this
``__init__`` imports none of them, so the job agent's launcher loads only what it names.
"""

__all__ = [
    "agent_records",
    "atomicfile",
    "capture",
    "capture_index",
    "capture_records",
    "checkpoint_lines",
    "claim",
    "cursors",
    "late_imports",
    "logkeep",
    "loglines",
    "logsegments",
    "outputlog",
    "rundir",
    "runlock",
    "state_folder",
    "states",
    "stop_marks",
    "trainer_announcements",
]
