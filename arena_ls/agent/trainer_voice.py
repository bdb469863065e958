"""How a back end's trainer speaks in the run's log: through its run's ``RunRecord``."""

from __future__ import annotations

from collections.abc import Callable

from arena_ls.agent.attempts import RunRecord
from arena_ls.run.supervisor_events import SupervisorEvent


class TrainerVoice:
    """The base of both trainers (``LocalTrainer``, ``RayTrainer``): their ``arena`` lines."""

    tell: Callable[[SupervisorEvent], None]
    """A record of the supervisor's own, in the run's log (stream ``arena``): the run record's."""
    say: Callable[[str], None]
    """A note no reader acts on."""
    warn: Callable[[str], None]
    """A warning the person sees as one (``warning: ...``)."""

    def speak_through(self, record: RunRecord) -> None:
        self.tell, self.say, self.warn = record.tell, record.say, record.warn
