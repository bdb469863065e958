"""The agent's side of the power rule and the relaunch gate: the machine's readings, on a cadence.

The decisions are pure (``power.PowerWatch``, ``relaunch_gate.relaunch_gate``);
this reads the machine for them (``health.agent_hardware``: the real one,
or the fake its server was given) at most every ``CHECK_SECONDS``, and says
on the run's log what they decided.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from arena_ls.agent.power import PowerAction, PowerWatch
from arena_ls.agent.relaunch_gate import GateRules, MachineReading
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import PowerSpec

log = logging.getLogger("arena_ls.agent")

CHECK_SECONDS = 1.0
"""How often a running trainer's machine is read for the power rule."""
GATE_POLL_SECONDS = 1.0
"""How often a held relaunch reads the machine again."""


class PowerGuard:
    """The power rule of one run, and the readings of its relaunch gate."""

    def __init__(self, spec: PowerSpec | None, say: Callable[[AgentRecord], None]) -> None:
        self.spec = spec
        self.watch = PowerWatch.for_spec(spec) if spec is not None else None
        self.say = say
        self._hardware: Any = None
        self._next_check = 0.0

    def hardware(self) -> Any:
        if self._hardware is None:
            from arena_ls.health.agent_hardware import agent_hardware  # only a run with a power rule loads it

            self._hardware = agent_hardware()
        return self._hardware

    def reading(self) -> MachineReading:
        """The machine now; a part that cannot be read is None (its check passes)."""
        hardware = self.hardware()
        plugged: bool | None = None
        ram: int | None = None
        try:
            battery = hardware.battery()
            plugged = None if battery is None else battery.plugged_in
        except Exception as error:  # a reading must never stop a run
            log.warning("battery reading failed: %s", error)
        try:
            ram = int(hardware.ram().available_mb)
        except Exception as error:
            log.warning("RAM reading failed: %s", error)
        return MachineReading(plugged_in=plugged, available_ram_mb=ram)

    def poll(self, now: float) -> PowerAction | None:
        """While the trainer runs: at most every ``CHECK_SECONDS``, the power rule's action (said)."""
        if self.watch is None or now < self._next_check:
            return None
        self._next_check = now + CHECK_SECONDS
        action = self.watch.observe(now, self.reading().plugged_in)
        if action is not None:
            self.say(self.watch.event(action))
        return action

    def resume_after_stop(self) -> bool:
        return self.watch is not None and self.watch.resume_after_stop()

    def gate_rules(self, *, need_power: bool = False) -> GateRules | None:
        """The relaunch gate's rules; None for a run without them (a spec written before them)."""
        if self.spec is None:
            return None
        return GateRules(
            require_plugged_in=self.spec.require_plugged_in or need_power,
            min_free_ram_mb=self.spec.min_free_ram_mb,
        )

    def close(self) -> None:
        close = getattr(self._hardware, "close", None)
        if callable(close):
            try:
                close()
            except Exception as error:
                log.warning("closing the hardware failed: %s", error)
