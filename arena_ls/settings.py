"""Typed settings (contract section 5), converted at the boundary.

Settings come from ``initializationOptions`` and ``workspace/configuration``
(section ``arena``). Bad values never crash the server: each one is reported
as a problem string and replaced by its default.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

from arena_ls.setting_decl import SECTION, Declared, Kind, declared_settings, kind, section, setting
from arena_ls.validation import (
    BOOLEAN,
    Check,
    Invalid,
    choice,
    integer,
    list_of,
    number,
    one_of,
    positive_number,
    string,
)

GpuContention = Literal["error", "warn", "off"]
OnBattery = Literal["stop", "warn", "ignore"]
AfterReboot = Literal["ask", "resume", "never"]
StallAction = Literal["warn", "restart"]
TUNABLE_GATES = ("AR010", "AR011", "AR012")
"""The gates whose severity setting ``gates.severity`` may set (contract 7.3)."""
GATE_SEVERITIES = ("error", "warning", "information")

_NON_EMPTY = string(min_length=1)
_PYTHON_CHECK: Check[tuple[str, ...]] = one_of(
    _NON_EMPTY.map(lambda path: (path,)),
    list_of(_NON_EMPTY, min_length=1).map(tuple),
    expected="a path or a non-empty list of strings",
)
_TEXT = kind(_NON_EMPTY, type="string")
_PYTHON = kind(_PYTHON_CHECK, type=["string", "array"], items={"type": "string"})
_FLAG = kind(BOOLEAN, type="boolean")
_COUNT = kind(integer(minimum=0), type="integer", minimum=0)
_POSITIVE = kind(positive_number(), type="number", exclusiveMinimum=0)
_FRACTION = kind(number(0, 1), type="number", minimum=0, maximum=1)
_WINDOW = kind(integer(minimum=2), type="integer", minimum=2)
"""A window of points: a median and a spread need at least two."""
_GATE_SEVERITY = kind(
    Check(
        lambda value: (
            isinstance(value, Mapping)
            and all(code in TUNABLE_GATES and level in GATE_SEVERITIES for code, level in value.items())
        ),
        'an object of AR010, AR011 or AR012 to "error", "warning" or "information"',
        lambda value: MappingProxyType(dict(value)),
    ),
    type="object",
    properties={code: {"type": "string", "enum": list(GATE_SEVERITIES)} for code in TUNABLE_GATES},
    additionalProperties=False,
)


def _one_of(*options: str) -> Kind[str]:
    return kind(choice(*options), type="string", enum=list(options))


@attrs.frozen
class PowerSettings:
    """Power during a run (contract 7.3): the seed's rule "never continue on battery"."""

    on_battery: OnBattery = setting(
        "power.onBattery",
        "stop",
        _one_of("stop", "warn", "ignore"),
        "What a run does when its machine goes on battery: stop it cooperatively after power.graceSeconds"
        " (the seed's rule: never continue on battery), warn, or nothing.",
    )
    grace_seconds: float = setting(
        "power.graceSeconds",
        60.0,
        kind(number(minimum=0).map(float), type="number", minimum=0),
        'Seconds on battery before power.onBattery "stop" stops the run.',
    )
    """A short unplug is forgiven."""
    resume_on_ac: bool = setting(
        "power.resumeOnAc",
        True,
        _FLAG,
        "Start a run stopped for battery again, with resume, when power returns (once).",
    )
    keep_awake: bool = setting(
        "power.keepAwake",
        True,
        _FLAG,
        "While a train run of this machine runs, its job agent keeps the machine from sleeping"
        " (Windows SetThreadExecutionState, a logind inhibitor on Linux, caffeinate on macOS)"
        " and lets go when the run ends or the agent dies.",
    )


_COMMAND = kind(
    list_of(_NON_EMPTY).map(lambda parts: tuple(parts) or None),
    type="array",
    items={"type": "string"},
).or_none()
"""An argument list; ``[]`` and null: none."""


@attrs.frozen
class NotifySettings:
    """How the job agent tells the person what happened to a run, with no editor open (contract 8.3)."""

    desktop: bool = setting(
        "notify.desktop",
        True,
        _FLAG,
        "A desktop notification when a run ends, is relaunched, is stopped by the battery or waits for"
        " a person (a toast on Windows, org.freedesktop.Notifications on Linux, osascript on macOS).",
    )
    command: tuple[str, ...] | None = setting(
        "notify.command",
        None,
        _COMMAND,
        "An argument list run for each of those events, with the event as one JSON object on its"
        " standard input (never through a shell; 10 s timeout), such as"
        ' `["python", "C:/tools/tell-my-phone.py"]`. Null: none. See docs/protocol.md.',
        markdown=True,
    )


@attrs.frozen
class PreflightSettings:
    """Thresholds of the pre-flight checks."""

    min_free_ram_mb: int = setting(
        "preflight.minFreeRamMb", 5120, _COUNT, "Refuse a start when less RAM than this (MB) is available."
    )
    require_plugged_in: bool = setting(
        "preflight.requirePluggedIn", True, _FLAG, "Refuse a start on battery power."
    )
    gpu_contention: GpuContention = setting(
        "preflight.gpuContention",
        "error",
        _one_of("error", "warn", "off"),
        "What a foreign compute process on the GPU does to a start: refuse it, warn, or nothing.",
    )
    min_free_disk_mb: int = setting(
        "preflight.minFreeDiskMb",
        1024,
        _COUNT,
        "Refuse a start when the checkpoint disk has less free space than this (MB).",
    )


@attrs.frozen
class InsightSettings:
    """Thresholds of the run insights (``docs/insights.md`` explains each one)."""

    enabled: bool = setting(
        "insights.enabled",
        True,
        _FLAG,
        "Compute run insights (loss spikes, gradient health, GPU bubbles...); false: none is computed.",
    )
    loss_spike_window: int = setting(
        "insights.lossSpikeWindow",
        20,
        _WINDOW,
        "Progress points before a loss whose median and MAD are its baseline (loss-spike).",
    )
    loss_spike_mads: float = setting(
        "insights.lossSpikeMads",
        8.0,
        _POSITIVE,
        "A loss spike is a loss more than this many robust spreads (1.4826 x MAD) above the median.",
    )
    loss_spike_min_jump: float = setting(
        "insights.lossSpikeMinJump",
        0.25,
        _POSITIVE,
        "...and at least this fraction above the median (a flat loss has a tiny MAD).",
    )
    loss_spike_hold_seconds: float = setting(
        "insights.lossSpikeHoldSeconds",
        30.0,
        _POSITIVE,
        "A loss spike stays shown at least this many seconds, and until 5 later points are back in range.",
    )
    grad_window: int = setting(
        "insights.gradWindow", 10, _WINDOW, "Health lines averaged by the grad-health insight."
    )
    grad_warmup_steps: int = setting(
        "insights.gradWarmupSteps",
        200,
        _COUNT,
        "Health lines before this step are not judged (early training clips by nature).",
    )
    grad_clip_fraction: float = setting(
        "insights.gradClipFraction",
        0.05,
        _FRACTION,
        "grad-health when the mean clip fraction over the window reaches this.",
    )
    grad_param_ratio: float = setting(
        "insights.gradParamRatio",
        0.1,
        _POSITIVE,
        "grad-health when the median gradient/parameter norm ratio reaches this.",
    )
    gpu_bubble_utilization: float = setting(
        "insights.gpuBubbleUtilization",
        50.0,
        kind(number(0, 100), type="number", minimum=0, maximum=100),
        "GPU utilisation (percent) under which a sample counts as idle (gpu-bubble).",
    )
    gpu_bubble_window_seconds: float = setting(
        "insights.gpuBubbleWindowSeconds",
        300.0,
        _POSITIVE,
        "Seconds of GPU samples judged together by gpu-bubble.",
    )
    gpu_bubble_fraction: float = setting(
        "insights.gpuBubbleFraction",
        0.8,
        _FRACTION,
        "gpu-bubble when at least this fraction of the window's samples are idle.",
    )
    gpu_bubble_warmup_seconds: float = setting(
        "insights.gpuBubbleWarmupSeconds",
        120.0,
        _POSITIVE,
        "Seconds of computing (since the launch's first progress) before gpu-bubble may fire.",
    )
    checkpoint_overdue_factor: float = setting(
        "insights.checkpointOverdueFactor",
        2.0,
        _POSITIVE,
        "checkpoint-overdue after this many times the observed checkpoint interval.",
    )
    thermal_max_celsius: int | None = setting(
        "insights.thermalMaxCelsius",
        None,
        _COUNT.or_none(),
        "Temperature (Celsius) at which the thermal insight fires."
        " Null: the GPU's own slowdown temperature (NVML).",
    )
    loss_spike_action: str = setting(
        "insights.lossSpikeAction",
        "warn",
        _one_of("warn", "rollback"),
        'On a loss spike: "warn" (say so) or "rollback" (stop cooperatively, resume from the newest'
        " verified checkpoint insights.rollbackStepsBefore steps before the spike, skipping"
        " insights.rollbackSkipBatches batches through resume.args' {skip}).",
    )
    rollback_steps_before: int = setting(
        "insights.rollbackStepsBefore",
        100,
        _COUNT,
        "A rollback resumes from a checkpoint at least this many steps before the spike.",
    )
    rollback_skip_batches: int = setting(
        "insights.rollbackSkipBatches",
        200,
        _COUNT,
        "Batches a rollback skips: the value of {skip} in resume.args.",
    )
    rollback_max: int = setting(
        "insights.rollbackMax", 3, _COUNT, "The most loss-spike rollbacks of one run."
    )


@attrs.frozen
class ProbeSettings:
    """The VRAM probe (``arena/start {probe: true}``)."""

    allow_without_gpu: bool = setting(
        "probe.allowWithoutGpu",
        False,
        _FLAG,
        "On a machine without a readable GPU, a VRAM probe that ran to the end passes (CPU-only machines).",
    )
    sample_seconds: float = setting(
        "probe.sampleSeconds",
        0.25,
        _POSITIVE,
        "How often (seconds) the VRAM probe reads the GPU memory of its processes.",
    )


@attrs.frozen
class ClusterSettings:
    """``clusters.NAME.*``: a user's own address, token file and interpreter for a cluster."""

    address: str | None = None
    """Overrides the manifest's address (addresses stay out of a shared manifest)."""
    token_file: str | None = None
    """The file holding the cluster's token (Ray's ``RAY_AUTH_MODE=token``)."""
    python: tuple[str, ...] = ("python",)
    """What ``{python}`` means on the cluster (its workers' interpreter)."""


_CLUSTERS: Kind[Any] = kind(
    Check(lambda value: isinstance(value, Mapping), "an object"),
    type="object",
    additionalProperties={
        "type": "object",
        "properties": {
            "address": {
                "type": "string",
                "description": "The head's dashboard (Ray's Jobs API), e.g. http://127.0.0.1:8265;"
                " overrides the manifest's.",
            },
            "tokenFile": {
                "type": "string",
                "description": (
                    "A file holding the cluster's token (Ray's RAY_AUTH_MODE=token); never logged."
                ),
            },
            "python": {
                "type": ["string", "array"],
                "items": {"type": "string"},
                "description": "What {python} means on the cluster (default: the workers' own python).",
            },
        },
    },
)


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
