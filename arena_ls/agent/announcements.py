"""What a trainer's announcement changes in its run, the same for every back end (contract 3).

The local trainer's output (``agent/local/output.py``) and the cluster's log copy
(``cluster/ray_logs.py``) each own one ``Announcements`` handler and hand it every parsed
``Checkpoint`` and ``Progress``; it applies them under the run's lock: the run's record of
checkpoints (what a resume may fall back to, contract 8.2), its step, total and loss, the
evidence of a bad loss (warned once), whether the attempt announced anything, and how often the
state is written. What a back end does beyond that (the local stall and spike watches) is its
``watch``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.statewriter import StateWriter
from arena_ls.run.rundir import CheckpointRecord, RunState
from arena_ls.run.trainer_announcements import Checkpoint, Event, EventParser, Progress, is_bad_loss


def apply_checkpoint(event: Checkpoint, run_id: str, record: RunRecord, state: RunState) -> CheckpointRecord:
    """The announced checkpoint joins the run's record (its last, and one to fall back to); the
    state's step is at least its step. The caller holds the run's lock, then asks its state writer
    to record the job's checkpoint with the record returned."""
    announced = CheckpointRecord(
        step=event.step,
        path=event.path,
        at=time.time(),
        run_id=run_id,
        bytes=event.bytes,
        sha256=event.sha256,
    )
    record.add_checkpoint(announced)
    state.step = max(state.step or 0, event.step)
    return announced


def apply_progress(event: Progress, record: RunRecord, state: RunState, known_bad: str | None) -> str | None:
    """The announced step, total and loss go into the state (a relaunch's downtime ends at the
    first progress after it); returns the bad-loss evidence, ``known_bad`` once there is one (the
    first NaN or inf is the evidence, said once). The caller holds the run's lock."""
    record.progressed(time.time())
    state.step = event.step
    state.total_steps = event.total or state.total_steps
    state.loss = event.loss
    if known_bad is None and is_bad_loss(event.loss):
        return f"loss is {event.loss} at step {event.step}"
    return known_bad


PROGRESS_WRITE_INTERVAL = 1.0
"""A progress announcement has ``state.json`` written at most this often (a checkpoint at once)."""

ProgressWatch = Callable[[Progress, float], bool]
"""A back end's own look at a progress announcement (under the run's lock, with the monotonic
time it came): True when it had the state written itself."""


class Announcements:
    """One trainer's announcements applied to its run: the handler both back ends' output uses.

    It owns the attempt's parser (the job's patterns) and what the announcements left: whether
    the current attempt announced anything, and the evidence of a bad loss (the first NaN or inf,
    warned once a run). A back end hands it each parsed ``Checkpoint`` and ``Progress``; its own
    watch of the progress (the local stall and spike watches) is ``watch``."""

    def __init__(self, record: RunRecord, writer: StateWriter, watch: ProgressWatch | None = None) -> None:
        self.record = record
        self.writer = writer
        self.watch = watch
        self.parser = EventParser.for_patterns(record.spec.progress_pattern, record.spec.checkpoint_pattern)
        self.attempt_announced = False
        """The current attempt announced progress or a checkpoint (a refusal to resume did not)."""
        self.nan_evidence: str | None = None
        self.last_progress_write = 0.0

    def handle(self, event: Event | None) -> None:
        """A parsed line: a checkpoint or progress changes the run; anything else, nothing."""
        if isinstance(event, Checkpoint):
            self.checkpoint(event)
        elif isinstance(event, Progress):
            self.progress(event)

    def checkpoint(self, event: Checkpoint) -> None:
        """The checkpoint joins the run's record, and the job's is written at once."""
        record = self.record
        with record.lock:
            self.attempt_announced = True
            announced = apply_checkpoint(event, record.spec.run_id, record, record.state)
        self.writer.request(job_checkpoint=(record.spec.job_id, announced))

    def progress(self, event: Progress) -> None:
        """The step, total and loss go into the state (written at most every second unless the
        watch wrote it); a first bad loss is warned."""
        now = time.monotonic()
        record = self.record
        with record.lock:
            self.attempt_announced = True
            known = self.nan_evidence
            self.nan_evidence = apply_progress(event, record, record.state, known)
            if self.nan_evidence is not None and known is None:
                record.warn(self.nan_evidence)
            written = self.watch is not None and self.watch(event, now)
            if not written and now - self.last_progress_write >= PROGRESS_WRITE_INTERVAL:
                self.last_progress_write = now
                self.writer.request()

    def tell_protocol(self) -> None:
        """A trainer of another ``@arena`` protocol is told so once a run, never failed (contract 8.1)."""
        note = self.parser.take_protocol_note()
        if note is not None:
            self.record.warn(note)
