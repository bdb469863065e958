"""Typed settings (contract section 5), converted at the boundary.

Settings come from ``initializationOptions`` and ``workspace/configuration``
(section ``arena``). Bad values never crash the server: each one is reported
as a problem string and replaced by its default.

The sections (``PowerSettings``, ``InsightSettings``...) and the kinds of values
live in ``setting_sections.py``; every name of it is importable from here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from arena_ls.setting_decl import SECTION, Declared, declared_settings, kind, section, setting
from arena_ls.setting_sections import (  # the kinds of the fields below
    _CLUSTERS,
    _FLAG,
    _GATE_SEVERITY,
    _NON_EMPTY,
    _POSITIVE,
    _PYTHON,
    _PYTHON_CHECK,
    _TEXT,
    _one_of,
)
from arena_ls.setting_sections import _COUNT as _COUNT  # the kinds a new field reuses (CONTRIBUTING.md)
from arena_ls.setting_sections import _FRACTION as _FRACTION
from arena_ls.setting_sections import _WINDOW as _WINDOW
from arena_ls.setting_sections import GATE_SEVERITIES as GATE_SEVERITIES
from arena_ls.setting_sections import TUNABLE_GATES as TUNABLE_GATES
from arena_ls.setting_sections import AfterReboot as AfterReboot
from arena_ls.setting_sections import ClusterSettings as ClusterSettings
from arena_ls.setting_sections import GpuContention as GpuContention
from arena_ls.setting_sections import InsightSettings as InsightSettings
from arena_ls.setting_sections import NotifySettings as NotifySettings
from arena_ls.setting_sections import OnBattery as OnBattery
from arena_ls.setting_sections import PowerSettings as PowerSettings
from arena_ls.setting_sections import PreflightSettings as PreflightSettings
from arena_ls.setting_sections import ProbeSettings as ProbeSettings
from arena_ls.setting_sections import StallAction as StallAction
from arena_ls.validation import Check, Invalid, number


@attrs.frozen
class Settings:
    """Everything the server can be configured with.

    Each field is declared once with :func:`~arena_ls.setting_decl.setting`
    (key, default, kind, the description editors show); ``_FIELDS`` below and
    the editors' declarations are derived from it (CONTRIBUTING.md: adding a setting).
    """

    manifest: str = setting(
        "manifest",
        "training/manifest.json",
        _TEXT,
        "The job manifest, relative to the workspace root (or absolute).",
    )
    state_dir: str = setting(
        "stateDir", ".aide/training", _TEXT, "The state folder, relative to the workspace root (or absolute)."
    )
    python: tuple[str, ...] = setting(
        "python",
        None,
        _PYTHON,
        "The interpreter that `{python}` in a job's `command` expands to: a path, or an argument list"
        ' such as `["py", "-3.10", "-E"]`. Null: the server\'s own interpreter.',
        markdown=True,
        factory=lambda: (sys.executable,),
        editor_default=None,
    )
    preflight: PreflightSettings = section(PreflightSettings)
    device_fp32_only: bool | None = setting(
        "device.fp32Only",
        None,
        _FLAG.or_none(),
        "Treat the device as FP32-only (mixed precision is flagged)."
        " Null: decide from the GPU's compute capability.",
    )
    logs_notify_hz: float = setting(
        "logs.notifyHz",
        50.0,
        _POSITIVE,
        "At most this many log notifications a second; a line after a quiet moment is sent at once.",
    )
    logs_keep_runs_mb: float = setting(
        "logs.keepRunsMb",
        10240.0,
        kind(number(0, 2**40), type="number", minimum=0, maximum=2**40),
        "All finished runs' logs of the workspace take at most this many MB:"
        " the oldest runs are deleted first; the last run of each job is always kept.",
    )
    logs_max_run_mb: float = setting(
        "logs.maxRunMb",
        2048.0,
        kind(number(0, 2**40), type="number", minimum=0, maximum=2**40),
        "One run's log takes at most about this many MB: past it the first and last halves are kept"
        " and the middle is dropped with one line saying how many lines; every progress, checkpoint,"
        " eval and health line is kept. 0: no cap.",
    )
    watchdog_stall_seconds: float = setting(
        "watchdog.stallSeconds",
        600.0,
        _POSITIVE,
        "A running trainer silent for this many seconds is reported as stalled: the ceiling of the"
        " stall threshold (stallFactor x its median step time, at least stallMinSeconds).",
    )
    watchdog_stall_factor: float = setting(
        "watchdog.stallFactor",
        10.0,
        _POSITIVE,
        "A train run silent for this many times its median step time (between stallMinSeconds and"
        " stallSeconds) is stalled.",
    )
    watchdog_stall_min_seconds: float = setting(
        "watchdog.stallMinSeconds",
        120.0,
        _POSITIVE,
        "The shortest silence that makes a train run stalled, however fast its steps.",
    )
    watchdog_stall_action: StallAction = setting(
        "watchdog.stallAction",
        "warn",
        _one_of("warn", "restart"),
        "What a stalled train run gets once its stacks, CPU time and GPU use are recorded: a warning, or"
        " a restart (a cooperative stop, then a relaunch from its last checkpoint, counted as a"
        " relaunch). A trainer whose CPU time or GPU use grew is only warned about.",
    )
    watchdog_after_reboot: AfterReboot = setting(
        "watchdog.afterReboot",
        "ask",
        _one_of("ask", "resume", "never"),
        "A run the machine's restart interrupted: every client offers to resume it (ask), the first"
        " server after the restart resumes it once from its checkpoint, after the pre-flight (resume),"
        " or nothing is offered (never).",
    )
    insights: InsightSettings = section(InsightSettings)
    probe: ProbeSettings = section(ProbeSettings)
    power: PowerSettings = section(PowerSettings)
    notify: NotifySettings = section(NotifySettings)
    gates_severity: Mapping[str, str] = setting(
        "gates.severity",
        None,
        _GATE_SEVERITY,
        "Severities of the gates `AR010`, `AR011` and `AR012` in this workspace, such as"
        ' `{"AR010": "error"}` (`error`, `warning` or `information`).'
        " `AR010` is an error on Windows by default.",
        markdown=True,
        factory=lambda: MappingProxyType({}),
    )
    clusters: tuple[tuple[str, ClusterSettings], ...] = setting(
        "clusters",
        (),
        _CLUSTERS,
        "Your own settings of the manifest's clusters, by name (`runOn` of a job):"
        ' `{"lab": {"address": "http://127.0.0.1:8265", "tokenFile": "~/.config/arena/lab.token"}}`.'
        " Addresses and tokens stay out of the shared manifest. See docs/clusters.md.",
        markdown=True,
        editor_default={},
        parsed=False,
    )
    """Per-user settings of the manifest's clusters, by name (parsed by ``_parse_clusters``)."""

    def cluster(self, name: str) -> ClusterSettings:
        """The settings of cluster ``name`` (the defaults when none are given)."""
        return dict(self.clusters).get(name, ClusterSettings())


EDITOR_SETTINGS = (
    Declared(
        "interpreter",
        "The Python interpreter that runs the `arena_ls` server, as an argument list (for example"
        ' `["/usr/bin/python3"]` or `["py", "-3.11"]`). Empty: the Python extension\'s active environment,'
        " else `python3` (plain `py` on Windows, which runs the active virtual environment's Python).",
        {"type": "array", "items": {"type": "string"}},
        markdown=True,
        editor_default=[],
    ),
    Declared(
        "serverArgs",
        "Extra arguments appended to `python -m arena_ls`.",
        {"type": "array", "items": {"type": "string"}},
        markdown=True,
        editor_default=[],
    ),
    Declared(
        "showRawLines",
        "Show the trainer's own `@arena {...}` announcement lines (progress, checkpoints, evals, health)"
        " in each job's output channel. Off: they are hidden, since the readable line beside each"
        " says the same (the terminal's `arena logs --raw`).",
        {"type": "boolean"},
        markdown=True,
        scope="window",
        editor_default=False,
    ),
    Declared(
        "trace.server",
        "Trace the messages between VS Code and the arena-ls server in the Arena output channel.",
        {"type": "string", "enum": ["off", "messages", "verbose"]},
        scope="window",
        editor_default="off",
    ),
)
"""Settings only the editors read (the server never sees them); declared here beside the server's."""


_FIELDS: dict[str, tuple[str, Check[Any]]] = {
    found.declared.key: (found.target, found.declared.check)
    for found in declared_settings(Settings())
    if found.declared.check is not None
}
"""Dotted key -> (attribute path, check), derived from the declarations above."""
_SECTIONS = tuple(sorted({key.split(".")[0] for key in _FIELDS if "." in key}))
_NESTED = tuple(field.name for field in attrs.fields(Settings) if field.metadata.get(SECTION))
"""Sections held in their own settings object (``settings.preflight``...)."""


def _object(value: Any) -> Any:
    """``[]`` as ``{}``: Neovim encodes an empty Lua table as an empty array."""
    return {} if value == [] else value


def _flatten(options: Mapping[str, Any]) -> dict[str, Any]:
    """Accept both nested (``{"preflight": {"minFreeRamMb": 1}}``) and dotted keys."""
    flat: dict[str, Any] = {}
    for key, raw in options.items():
        value = _object(raw) if key in _SECTIONS else raw
        if isinstance(value, Mapping) and key in _SECTIONS:
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            flat[key] = value
    return flat


def parse_settings(options: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Build settings from client options; return them and the problems found.

    Unknown keys are ignored; a key with a bad value keeps the default and
    adds a problem naming the key. ``options`` may be None or any JSON value.
    """
    settings = base or Settings()
    options = _object(options)
    if options is None:
        return settings, []
    if not isinstance(options, Mapping):
        return settings, ["arena settings must be an object; using defaults"]
    arena = _object(options.get("arena"))
    if isinstance(arena, Mapping):
        options = arena
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for key, value in _flatten(options).items():
        if key not in _FIELDS:
            continue
        target, check = _FIELDS[key]
        try:
            checked = check.parse(value, ("arena", *key.split(".")))
        except Invalid as error:
            problems.append(f"{error.where} must be {error.expected}; using the default")
            continue
        section, _, name = target.partition(".")
        if name and section in _NESTED:
            nested.setdefault(section, {})[name] = checked
        else:
            top[target] = checked
    for section, values in nested.items():
        top[section] = attrs.evolve(getattr(settings, section), **values)
    clusters = _parse_clusters(options, settings, problems)
    if clusters is not None:
        top["clusters"] = clusters
    return attrs.evolve(settings, **top), problems


_CLUSTER_FIELDS: dict[str, tuple[str, Check[Any]]] = {
    "address": ("address", _NON_EMPTY),
    "tokenFile": ("token_file", _NON_EMPTY),
    "python": ("python", _PYTHON_CHECK),
}


def _parse_clusters(
    options: Mapping[str, Any], settings: Settings, problems: list[str]
) -> tuple[tuple[str, ClusterSettings], ...] | None:
    """``clusters`` (nested, or dotted ``clusters.NAME.address`` keys); None when not given."""
    raw: dict[str, dict[str, Any]] = {}
    given = False
    block = _object(options.get("clusters"))
    if block is not None:
        given = True
        if isinstance(block, Mapping):
            for name, raw_fields in block.items():
                fields = _object(raw_fields)
                if isinstance(fields, Mapping):
                    raw.setdefault(str(name), {}).update(fields)
                else:
                    problems.append(f"arena.clusters.{str(name)[:60]} must be an object; ignored")
        else:
            problems.append("arena.clusters must be an object; ignored")
    for key, value in options.items():
        parts = key.split(".") if isinstance(key, str) else []
        if len(parts) == 3 and parts[0] == "clusters":
            given = True
            raw.setdefault(parts[1], {})[parts[2]] = value
    if not given:
        return None
    clusters = dict(settings.clusters)
    for name, fields in raw.items():
        values: dict[str, Any] = {}
        for key, value in fields.items():
            if key not in _CLUSTER_FIELDS:
                continue
            target, check = _CLUSTER_FIELDS[key]
            try:
                values[target] = check.parse(value, ("arena", "clusters", name[:60], key))
            except Invalid as error:
                problems.append(f"{error.where} must be {error.expected}; using the default")
        clusters[name] = attrs.evolve(clusters.get(name, ClusterSettings()), **values)
    return tuple(sorted(clusters.items()))
