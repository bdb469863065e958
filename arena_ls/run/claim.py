"""The name of a run's agent claim, in its folder (standard library only: the launcher reads it).

The claim itself (``agent.trainer_start.claim_run``) is the job agent's; the file is the run
folder's, so a server reads it (``run.rundir``) without importing the agent's floor.
"""

AGENT_CLAIM = ".agent.claim"
"""The run's agent claim, in its folder: created, exclusively, by the one agent that may start its trainer."""
