"""A Ray submission's log, copied into the run's ``output.log`` and scanned for progress and checkpoints.

Part of ``RayTrainer`` (``ray_trainer``), moved out of the cluster agent: the
lines Ray holds of a submission are appended with the same writer a local run
uses, so every reader of the run folder sees a cluster run as a local one.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from arena_ls.agent.announcements import apply_checkpoint, apply_progress
from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.statewriter import StateWriter
from arena_ls.agent.trainer_voice import TrainerVoice
from arena_ls.cluster.jobsapi import ClusterError, JobsClient
from arena_ls.run import supervisor_events as events
from arena_ls.run.capture import LogLine
from arena_ls.run.capture_records import trainer_lines_after
from arena_ls.run.events import Checkpoint, EventParser, Progress
from arena_ls.run.outputlog import STDOUT, OutputWriter
from arena_ls.run.rundir import ClusterSpec, RunDir, RunSpec, RunState
from arena_ls.run.states import RunStatus
from arena_ls.run.supervisor_events import Kind

PROGRESS_WRITE_INTERVAL = 1.0
TAIL_LINES = 200


class RayLogCopy(TrainerVoice):
    """What a submission printed on the cluster, as the run's state sees it (the base of ``RayTrainer``)."""

    run_dir: RunDir
    run_record: RunRecord
    spec: RunSpec
    cluster: ClusterSpec
    state: RunState
    lock: threading.RLock
    writer: StateWriter
    output: OutputWriter
    parser: EventParser
    client: JobsClient | None
    tail_buffer: deque[str]
    copied: int
    """Lines of the current submission's log already in ``output.log``."""
    attempt_announced: bool
    nan_evidence: str | None
    last_progress_write: float
    unreachable_said: bool

    def _move(self, target: RunStatus) -> None:
        self.run_record.move(target)

    def tail(self) -> list[str]:
        """The submission's last lines (the failure's evidence; ``attempts.Trainer``)."""
        return list(self.tail_buffer)

    def _answering(self) -> None:
        if self.unreachable_said:
            self.unreachable_said = False
            self.say(f"cluster {self.cluster.name!r} answers again")

    def _unreachable(self, error: ClusterError) -> None:
        if not self.unreachable_said:
            self.unreachable_said = True
            self.warn(f"{error}; the job keeps running there, retrying")

    def _lines_recorded(self, sid: str) -> int:
        """How many of submission ``sid``'s log lines ``output.log`` already holds.

        Counted from the run's own log (the truth, whatever ``state.json`` says):
        the trainer's lines after the ``submitting ... as sid`` line."""
        marker = events.submitting(self.cluster.name, sid)

        def is_marker(line: LogLine) -> bool:
            event = line.event
            return event is not None and event.kind is Kind.SUBMITTING and event.fields == marker.fields

        return trainer_lines_after(self.run_dir.path, is_marker)

    def _copy_logs(self, sid: str, final: bool) -> None:
        """Append the submission's new complete lines (and, once it has ended, an unfinished last one)."""
        assert self.client is not None
        text = self.client.logs(sid)
        pieces = text.split("\n")
        complete, rest = pieces[:-1], pieces[-1]
        new = complete[self.copied :]
        if new:
            self.output.append(STDOUT, ("\n".join(new) + "\n").encode("utf-8", "replace"))
            self.copied += len(new)
            for line in new:
                self._scan(line)
        if final and rest and self.copied <= len(complete):
            self.output.append(STDOUT, rest.encode("utf-8", "replace"))
            self.output.finish_stream(STDOUT)
            self.copied += 1
            self._scan(rest)

    def _scan(self, line: str) -> None:
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
        self.tail_buffer.append(line)
        event = self.parser.parse_safely(line)
        note = self.parser.take_protocol_note()  # another @arena protocol: told once, never failed
        if note is not None:
            self.warn(note)
        if isinstance(event, Checkpoint):
            with self.lock:
                self.attempt_announced = True
                record = apply_checkpoint(event, self.spec.run_id, self.run_record, self.state)
            self.writer.request(job_checkpoint=(self.spec.job_id, record))
        elif isinstance(event, Progress):
            with self.lock:
                self.attempt_announced = True
                known = self.nan_evidence
                self.nan_evidence = apply_progress(event, self.run_record, self.state, known)
                if self.nan_evidence is not None and known is None:
                    self.warn(self.nan_evidence)
            now = time.monotonic()
            if now - self.last_progress_write >= PROGRESS_WRITE_INTERVAL:
                self.last_progress_write = now
                self.writer.request()
