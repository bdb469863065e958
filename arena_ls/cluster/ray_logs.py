"""A Ray submission's log, copied into the run's ``output.log`` and scanned for progress and checkpoints.

Owned by ``RayTrainer`` (``ray_trainer``): the lines Ray holds of a submission
are appended with the same writer a local run uses, so every reader of the run
folder sees a cluster run as a local one, and each announcement goes to the
run's ``Announcements`` handler (``agent/announcements.py``), the one the local
trainer's output uses too.
"""

from __future__ import annotations

from collections import deque

from arena_ls.agent.announcements import Announcements
from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.statewriter import StateWriter
from arena_ls.cluster.jobsapi import JobsClient
from arena_ls.run import agent_records
from arena_ls.run.agent_records import Kind
from arena_ls.run.capture import LogLine
from arena_ls.run.capture_records import trainer_lines_after
from arena_ls.run.outputlog import STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir

TAIL_LINES = 200


class RayLogCopy:
    """What a submission printed on the cluster, as the run's state sees it (``RayTrainer`` owns one)."""

    def __init__(
        self,
        record: RunRecord,
        run_dir: RunDir,
        cluster_name: str,
        writer: StateWriter,
        output: OutputWriter,
    ) -> None:
        self.run_dir = run_dir
        self.cluster_name = cluster_name
        self.output = output
        self.announcements = Announcements(record, writer)
        self.tail_buffer: deque[str] = deque(maxlen=TAIL_LINES)
        self.copied = 0
        """Lines of the current submission's log already in ``output.log``."""

    def tail(self) -> list[str]:
        """The submission's last lines (the failure's evidence; ``attempts.Trainer``)."""
        return list(self.tail_buffer)

    def lines_recorded(self, sid: str) -> int:
        """How many of submission ``sid``'s log lines ``output.log`` already holds.

        Counted from the run's own log (the truth, whatever ``state.json`` says):
        the trainer's lines after the ``submitting ... as sid`` line."""
        marker = agent_records.submitting(self.cluster_name, sid)

        def is_marker(line: LogLine) -> bool:
            event = line.event
            return event is not None and event.kind is Kind.SUBMITTING and event.fields == marker.fields

        return trainer_lines_after(self.run_dir.path, is_marker)

    def copy(self, client: JobsClient, sid: str, final: bool) -> None:
        """Append the submission's new complete lines (and, once it has ended, an unfinished last one)."""
        text = client.logs(sid)
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
        event = self.announcements.parser.parse_safely(line)
        self.announcements.tell_protocol()  # another @arena protocol: told once, never failed
        self.announcements.handle(event)
