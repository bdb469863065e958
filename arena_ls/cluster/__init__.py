"""Ray clusters as a place a job runs (contract 6.2).

arena-ls speaks Ray's Jobs REST API itself (``jobsapi``), with the token sent
as an explicit ``Authorization`` header, so neither the server nor the
cluster agent imports ``ray``: the server starts as fast as before, a
laptop needs no 384 MB Ray install to use a cluster, and each cluster can
have its own token in one process (Ray's SDK reads one token per process).

- ``config``: the cluster a job runs on, from the manifest and the settings.
- ``jobsapi``: the REST client (submit, status, logs, stop, packages, nodes).
- ``submission``: the entrypoint, its environment and resources, the
  ``working_dir`` package.
- ``status``: Ray's job status and failure message onto ours.
- ``preflight``: the ``cluster`` pre-flight check.
- ``agent``: the detached agent of one cluster run (``python -m
  arena_ls.cluster.agent RUN_DIR [--adopt]``).
- ``ckpt_remote``, ``ckpt_reader``: a cluster run's checkpoints verified
  on the cluster before any resume (a reader job; contract 8.2).
"""
