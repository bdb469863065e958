"""The relaunch gate (contract 7.3): the pre-flight checks the watchdog runs before each relaunch.

A pure function of the rules (the run's pre-flight thresholds, from its
spec) and one reading of the machine. While a check fails the run stays
``restarting`` with ``waitingFor`` (these failing checks, the shape of
1005's ``checks``) and no relaunch is counted; the agent's waiting loop
reads the machine again until every check passes, or a stop arrives.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class GateRules:
    """What a relaunch needs (``preflight.requirePluggedIn``, ``preflight.minFreeRamMb``)."""

    require_plugged_in: bool = True
    min_free_ram_mb: int = 5120


@attrs.frozen
class MachineReading:
    """One reading of the machine; None where it could not be read (that check then passes)."""

    plugged_in: bool | None = None
    available_ram_mb: int | None = None


def relaunch_gate(rules: GateRules, reading: MachineReading) -> list[dict[str, Any]]:
    """The failing checks (``[{name, ok: false, message}]``); empty when the relaunch may happen."""
    failing: list[dict[str, Any]] = []
    if rules.require_plugged_in and reading.plugged_in is False:
        failing.append({"name": "power", "ok": False, "message": "on battery: the relaunch waits for power"})
    ram = reading.available_ram_mb
    if ram is not None and ram < rules.min_free_ram_mb:
        message = f"{ram} MB of RAM available, {rules.min_free_ram_mb} MB needed: the relaunch waits"
        failing.append({"name": "ram", "ok": False, "message": message})
    return failing


def describe_wait(failing: list[dict[str, Any]]) -> str:
    """The run's ``arena`` line while it waits."""
    return "relaunch held by pre-flight: " + "; ".join(f"{c['name']}: {c['message']}" for c in failing)
