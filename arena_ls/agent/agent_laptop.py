"""The agent's side of the laptop (contract 8.3): the machine kept awake, and the person told.

``Laptop`` joins the two to the agent: ``start`` (after the run's first state)
takes the keep-awake hold (``keep_awake``) and has its outcome recorded;
``release`` lets go once the run's attempts are over; ``finish`` sends the
last notifications (``notifier``), whose events the state writer hands over
as each state is written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from arena_ls.agent.keep_awake import KeepAwake
from arena_ls.agent.notifier import Notifier, told_keys
from arena_ls.agent.statewriter import StateWriter
from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import RunDir, RunSpec, RunState


class Laptop:
    """One run's keep-awake hold and notifier."""

    def __init__(
        self,
        spec: RunSpec,
        run_dir: RunDir,
        state: RunState,
        lock: threading.RLock,
        tell: Callable[[AgentRecord], None],
        writer: StateWriter,
    ) -> None:
        self.state, self.lock, self.tell, self.writer = state, lock, tell, writer
        self.awake = KeepAwake(spec)
        self.notifier: Notifier | None = None
        notify = spec.notify
        if notify is not None and (notify.desktop or notify.command):
            told = told_keys(run_dir.path)
            self.notifier = Notifier(spec, notify, run_dir.log_path, tell, told=told)
            writer.observe_with(self.notifier.observe)

    def start(self) -> None:
        """The run starts: keep the machine awake if it should, and record whether it is."""
        self.awake.take(self.state, self.lock, lambda text: self.tell(agent_records.note(text)))
        self.writer.request()

    def release(self) -> None:
        """The run's attempts are over: the machine may sleep again."""
        self.awake.release()

    def finish(self) -> None:
        """After the final state: the last notifications are sent (bounded), then the notifier stops."""
        if self.notifier is not None:
            self.notifier.close()
