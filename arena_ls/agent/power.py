"""Power during a run (contract 7.3): the seed's rule "never start **or continue** on battery".

A pure policy: :class:`PowerWatch` is told, at each reading, the time and
whether the machine is plugged in, and answers what the agent must do. The
agent owns it (a run must be stopped on battery while no editor is open).

- ``stop`` (default): on battery for ``graceSeconds`` (a short unplug is
  forgiven) the run is stopped cooperatively (``stoppedBy`` ``battery``);
  with ``resumeOnAc`` it is started again with resume when power returns,
  once: a second battery stop ends the run.
- ``warn``: one warning per unplug; the run goes on.
- ``ignore``: nothing.

A machine with no battery (``None``) counts as plugged in.
"""

from __future__ import annotations

import enum

import attrs

from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import PowerSpec
from arena_ls.settings import Settings


def power_spec(settings: Settings) -> PowerSpec:
    """The run's ``power`` spec: the power settings and the relaunch gate's pre-flight thresholds."""
    power, preflight = settings.power, settings.preflight
    return PowerSpec(
        on_battery=power.on_battery,
        grace_seconds=power.grace_seconds,
        resume_on_ac=power.resume_on_ac,
        require_plugged_in=preflight.require_plugged_in,
        min_free_ram_mb=preflight.min_free_ram_mb,
        keep_awake=power.keep_awake,
    )


@attrs.frozen
class PowerRules:
    """The run's power settings, as the server wrote them into its spec at start."""

    on_battery: str = "stop"
    grace_seconds: float = 60.0
    resume_on_ac: bool = True


class PowerAction(enum.Enum):
    UNPLUGGED = "unplugged"
    """Power just went: say so (and, with ``stop``, when the run will be stopped)."""
    PLUGGED_BACK = "plugged-back"
    """Power returned within the grace: the run goes on."""
    STOP = "stop"
    """On battery for the whole grace: stop the run cooperatively."""


@attrs.define
class PowerWatch:
    """What the agent does about power, from one reading to the next."""

    rules: PowerRules

    @classmethod
    def for_spec(cls, spec: PowerSpec) -> PowerWatch:
        return cls(PowerRules(spec.on_battery, spec.grace_seconds, spec.resume_on_ac))

    unplugged_since: float | None = None
    resumes_left: int = 1
    stopping: bool = False

    def observe(self, now: float, plugged_in: bool | None) -> PowerAction | None:
        """One reading while the trainer runs; the action it calls for, if any."""
        if self.rules.on_battery == "ignore" or self.stopping:
            return None
        if plugged_in is not False:
            was_unplugged = self.unplugged_since is not None
            self.unplugged_since = None
            return PowerAction.PLUGGED_BACK if was_unplugged else None
        if self.unplugged_since is None:
            self.unplugged_since = now
            return PowerAction.UNPLUGGED
        if self.rules.on_battery == "stop" and now - self.unplugged_since >= self.rules.grace_seconds:
            self.stopping = True
            return PowerAction.STOP
        return None

    def resume_after_stop(self) -> bool:
        """The trainer stopped for battery: True when the run waits for power to start it again.

        Once: the run's second battery stop ends it ``stopped``.
        """
        self.stopping = False
        self.unplugged_since = None
        if not self.rules.resume_on_ac or self.resumes_left <= 0:
            return False
        self.resumes_left -= 1
        return True

    def message(self, action: PowerAction) -> str:
        """The run's ``arena`` line for ``action`` (the words of ``event``)."""
        return self.event(action).render()

    def event(self, action: PowerAction) -> AgentRecord:
        """The run's ``arena`` record for ``action``."""
        if action is PowerAction.UNPLUGGED:
            if self.rules.on_battery == "stop":
                return agent_records.warning(
                    "the machine is on battery (the GPU runs at about half speed): the run "
                    f"stops in {self.rules.grace_seconds:g}s unless power returns"
                )
            return agent_records.warning(
                "the machine is on battery (the GPU runs at about half speed); the run goes on"
            )
        if action is PowerAction.PLUGGED_BACK:
            return agent_records.note("power is back: the run goes on")
        then = (
            "it starts again, resuming, when power returns" if self.rules.resume_on_ac else "it stays stopped"
        )
        return agent_records.note(
            f"on battery for {self.rules.grace_seconds:g}s: stopping the run cooperatively "
            f"(power.onBattery stop); {then}"
        )
