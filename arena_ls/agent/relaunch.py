"""The relaunch decision after a crash, as one pure policy (issue 23, contract 7.1).

Both agents (``agent/local/agent.py`` on this machine, ``cluster/agent.py`` on
a cluster) gather the facts of a crash into ``CrashFacts`` and call
``decide`` once; they carry out what it answers. The rules, in order:

1. **Resume refused.** The attempt was launched with ``resume.args`` and the
   trainer exited non-zero (by itself, not by a signal) before announcing any
   progress or checkpoint: it refused to resume (a checkpoint at another
   step, none where it looked). No relaunch: ``crashed``, ``resume-refused``,
   its last line the evidence. Relaunching could only repeat the refusal, or,
   without ``resume.args``, start from step 0 over the checkpoint.
2. **Not relaunchable.** A task, a job without ``resume.args``, or
   ``maxRestarts`` 0: ``crashed`` with the crash's own failure.
3. **Known checkpoint.** The job's last checkpoint as the run began (the
   spec's ``jobCheckpoint``), the run's own announcements and the step the
   run was started from: the latest of them is where a relaunch resumes.
   A relaunch from step 0 is impossible while any of them is known.
4. **Verified.** Where a checkpoint is known, the agent has verified the
   candidates (``ckptverify.verify``, contract 8.2): the relaunch resumes from
   the newest that passed, which may be earlier than the known step; none
   passed: no relaunch, ``crashed``, ``resume-unknown`` naming what failed.
   (``verification`` None: the back end cannot look at the files, a cluster's.)
5. **Resume unknown.** None is known, but a file the trainer saved exists
   (a path announced by any run of the job, or a file like it in the folder
   of one; the agent looks, ``saved_file``): no relaunch, ``crashed``,
   ``resume-unknown`` naming the file. Only a person knows where it belongs.
6. Otherwise the watchdog's budget, crash-loop and backoff rules
   (``watchdog.Watchdog``) decide, from the known checkpoint or from scratch.

Nothing here reads a file, a clock or a process: the agents look, this decides.
"""

from __future__ import annotations

import attrs

from arena_ls.agent.ckptverify import Verification
from arena_ls.agent.failure import RESUME_UNKNOWN, resume_refused, resume_unknown
from arena_ls.agent.watchdog import GiveUp, GiveUpReason, Relaunch, Watchdog
from arena_ls.run.rundir import Failure


@attrs.frozen
class CrashFacts:
    """What an agent knows when its trainer crashed (or its submission failed)."""

    job_checkpoint: int | None
    """The job's last known checkpoint step as the run began (``RunSpec.job_checkpoint``)."""
    run_checkpoint: int | None
    """The last checkpoint step this run announced (any attempt)."""
    run_start: int | None
    """The step the run itself was started from (``RunSpec.resumed_from_step``)."""
    launched_with_resume: bool
    """This attempt's argv carried ``resume.args``."""
    announced: bool
    """This attempt announced progress or a checkpoint."""
    by_signal: bool
    """The trainer was killed by a signal (it did not exit by itself)."""
    last_line: str | None
    """The trainer's last line of output (the evidence of a refusal)."""
    saved_file: str | None = None
    """A file the trainer saved that exists (found by the agent only when no checkpoint is known)."""
    stalled: bool = False
    """The attempt was stopped by the stall watch (``watchdog.stallAction`` ``restart``): however it
    exited, it did not refuse to resume."""
    verification: Verification | None = None
    """The agent's verification of the known checkpoints (``needs_verification``); None: not looked."""

    @property
    def known_step(self) -> int | None:
        """The latest checkpoint step known for the job: where a relaunch resumes."""
        known = [s for s in (self.job_checkpoint, self.run_checkpoint, self.run_start) if s is not None]
        return max(known) if known else None

    @property
    def refused_resume(self) -> bool:
        """Launched with resume, it exited non-zero by itself before announcing anything."""
        return self.launched_with_resume and not self.announced and not self.by_signal and not self.stalled


@attrs.frozen
class Stop:
    """No relaunch, with a failure of the policy's own (``resume-refused``, ``resume-unknown``)."""

    failure: Failure


Decision = Relaunch | GiveUp | Stop


def needs_saved_file(facts: CrashFacts) -> bool:
    """Whether the agent must look for a saved file before ``decide`` (no checkpoint is known)."""
    return facts.known_step is None and not facts.refused_resume


def needs_verification(facts: CrashFacts, watchdog: Watchdog) -> bool:
    """Whether the agent must verify the known checkpoints before ``decide`` (a relaunch may follow)."""
    rules = watchdog.rules
    relaunchable = rules.relaunchable and rules.max_restarts > 0
    return relaunchable and facts.known_step is not None and not facts.refused_resume


def decide(facts: CrashFacts, watchdog: Watchdog) -> Decision:
    """The one relaunch decision (see the module docstring for the rules, in order)."""
    if facts.refused_resume:
        return Stop(resume_refused(facts.last_line))
    rules = watchdog.rules
    step = facts.known_step
    if not rules.relaunchable or rules.max_restarts <= 0:
        return GiveUp(GiveUpReason.NOT_RELAUNCHABLE, step)
    verification = facts.verification
    if step is not None and verification is not None:
        if verification.chosen is None:
            return Stop(Failure(RESUME_UNKNOWN, verification.evidence()))
        step = verification.chosen.step
    if step is None and facts.saved_file is not None:
        return Stop(resume_unknown(facts.saved_file))
    return watchdog.after_crash(step)
