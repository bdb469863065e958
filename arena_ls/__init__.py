"""arena-ls: run, watch and stop model-training jobs from the editor.

The package is laid out by architecture:

- ``arena_ls.protocol``: the LSP layer (pygls server, params, errors, notifications);
- ``arena_ls.run``: the run folder on disk (state, lock, output log and index, events), which
  every process reads;
- ``arena_ls.agent``: the job agent (``python -m arena_ls.agent.launch``) and what the cluster
  agent shares with it;
- ``arena_ls.lifecycle``: the server's side of a run: start, follow, stop, re-adopt;
- ``arena_ls.cluster``: Ray clusters as a place a job runs;
- ``arena_ls.manifest``: the allowlist of jobs and its diagnostics;
- ``arena_ls.gates``: static checks on trainer scripts;
- ``arena_ls.health``: RAM, CPU, battery and GPU probes and pre-flight checks;
- ``arena_ls.client``: the ``arena`` terminal client;
- ``arena_ls.platform``: every difference between POSIX and Windows.
"""

__version__ = "0.1.0"
