"""The machine as a job agent reads it: the real one, or the one its server was given.

A server started with injected hardware (``main(hardware=...)``: the fake
machine of the tests, a GPU and a battery this machine lacks) hands it on
to its agents, which enforce the power rule and the relaunch gate while no
server runs: a hardware object with ``agent_factory`` (``"module:callable"``
and the folder to import it from) is named in the server's environment,
which every agent it starts inherits. Without it an agent reads the real
machine (``SystemHardware``). A test seam, set only from code, like
``ARENA_NO_SPARE_AGENT``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from arena_ls.health.hardware import Hardware, SystemHardware

log = logging.getLogger(__name__)

AGENT_HARDWARE = "ARENA_AGENT_HARDWARE"
"""``module:callable`` that makes the agents' hardware (the server's own, re-created)."""
AGENT_HARDWARE_PATH = "ARENA_AGENT_HARDWARE_PATH"
"""The folder ``module`` is imported from."""


def share_with_agents(hardware: Any) -> None:
    """Name the server's injected hardware for the agents it starts (when it has ``agent_factory``)."""
    factory = getattr(hardware, "agent_factory", None)
    if not isinstance(factory, tuple) or len(factory) != 2:
        return
    target, folder = factory
    os.environ[AGENT_HARDWARE] = str(target)
    os.environ[AGENT_HARDWARE_PATH] = str(folder)


def agent_hardware() -> Hardware:
    """The hardware the agent reads: its server's (see the module docstring), else the real machine."""
    target = os.environ.get(AGENT_HARDWARE)
    if not target:
        return SystemHardware()
    try:
        module_name, _, attribute = target.partition(":")
        folder = os.environ.get(AGENT_HARDWARE_PATH)
        if folder and folder not in sys.path:
            sys.path.append(folder)
        made: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            made = getattr(made, part)
        hardware: Hardware = made()
        return hardware
    except Exception as error:  # the real machine rather than no power rule at all
        log.warning("could not make the agent's hardware %s (%s): reading the real machine", target, error)
        return SystemHardware()
