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
TUNABLE_GATES = ("AR010", "AR011", "AR012")
"""The gates whose severity setting ``gates.severity`` may set (contract 7.3)."""
GATE_SEVERITIES = ("error", "warning", "information")


@attrs.frozen
class PowerSettings:
    """Power during a run (contract 7.3): the seed's rule "never continue on battery"."""

    on_battery: OnBattery = "stop"
    """What a run does when its machine goes on battery: stop it, warn, or nothing."""
    grace_seconds: float = 60.0
    """How long on battery before ``stop`` stops the run (a short unplug is forgiven)."""
    resume_on_ac: bool = True
    """Start a run stopped for battery again, with resume, when power returns (once)."""


@attrs.frozen
class PreflightSettings:
    """Thresholds of the pre-flight checks."""

    min_free_ram_mb: int = 5120
    """Refuse a start when less RAM than this is available."""
    require_plugged_in: bool = True
    """Refuse a start on battery power."""
    gpu_contention: GpuContention = "error"
    """What a foreign compute process on the GPU does: refuse, warn or nothing."""
    min_free_disk_mb: int = 1024
    """Refuse a start when the checkpoint disk has less free space than this."""


@attrs.frozen
class InsightSettings:
    """Thresholds of the run insights (``docs/insights.md`` explains each one)."""

    enabled: bool = True
    """False: no insight is computed (``RunInfo.insights`` stays empty)."""
    loss_spike_window: int = 20
    """Progress points before a loss whose median and MAD are its baseline."""
    loss_spike_mads: float = 8.0
    """A spike is a loss more than this many robust spreads (1.4826 x MAD) above the median."""
    loss_spike_min_jump: float = 0.25
    """...and at least this fraction above the median (a flat loss has a tiny MAD)."""
    loss_spike_hold_seconds: float = 30.0
    """A spike stays shown at least this long, and until 5 later points are back in range."""
    grad_window: int = 10
    """Health lines averaged by ``grad-health``."""
    grad_warmup_steps: int = 200
    """Health lines before this step are not judged: early training clips by nature."""
    grad_clip_fraction: float = 0.05
    """``grad-health`` when the mean clip fraction over the window reaches this."""
    grad_param_ratio: float = 0.1
    """``grad-health`` when the median gradient/parameter norm ratio reaches this."""
    gpu_bubble_utilization: float = 50.0
    """GPU utilisation (percent) under which a sample counts as idle."""
    gpu_bubble_window_seconds: float = 300.0
    """Samples of this long a window are judged together."""
    gpu_bubble_fraction: float = 0.8
    """``gpu-bubble`` when at least this fraction of the window's samples are idle."""
    gpu_bubble_warmup_seconds: float = 120.0
    """Seconds of computing (since the launch's first progress) before ``gpu-bubble`` may fire."""
    checkpoint_overdue_factor: float = 2.0
    """``checkpoint-overdue`` after this many times the observed checkpoint interval."""
    thermal_max_celsius: int | None = None
    """None: the GPU's own slowdown temperature (NVML); a number overrides it."""


@attrs.frozen
class ProbeSettings:
    """The VRAM probe (``arena/start {probe: true}``)."""

    allow_without_gpu: bool = False
    """True: on a machine without a readable GPU a probe that ran to the end passes (CPU-only machines)."""
    sample_seconds: float = 0.25
    """How often the probe reads the GPU memory of its processes."""


@attrs.frozen
class ClusterSettings:
    """``clusters.NAME.*``: a user's own address, token file and interpreter for a cluster."""

    address: str | None = None
    """Overrides the manifest's address (addresses stay out of a shared manifest)."""
    token_file: str | None = None
    """The file holding the cluster's token (Ray's ``RAY_AUTH_MODE=token``)."""
    python: tuple[str, ...] = ("python",)
    """What ``{python}`` means on the cluster (its workers' interpreter)."""


@attrs.frozen
class Settings:
    """Everything the server can be configured with."""

    manifest: str = "training/manifest.json"
    """The manifest, relative to the workspace root (or absolute)."""
    state_dir: str = ".aide/training"
    """The state folder, relative to the workspace root (or absolute)."""
    python: tuple[str, ...] = attrs.field(factory=lambda: (sys.executable,))
    """The interpreter ``{python}`` expands to, as an argument list."""
    preflight: PreflightSettings = attrs.field(factory=PreflightSettings)
    device_fp32_only: bool | None = None
    """None: decide from the GPU's compute capability."""
    logs_notify_hz: float = 50.0
    """At most this many ``arena/log`` notifications a second."""
    logs_keep_runs_mb: float = 10240.0
    """All finished runs' logs of the workspace take at most this many MB (fractions allowed)."""
    logs_max_run_mb: float = 2048.0
    """One run's log takes at most about this many MB: its first and last halves (0: no cap)."""
    watchdog_stall_seconds: float = 600.0
    """A running trainer silent for this long is reported stalled."""
    insights: InsightSettings = attrs.field(factory=InsightSettings)
    probe: ProbeSettings = attrs.field(factory=ProbeSettings)
    clusters: tuple[tuple[str, ClusterSettings], ...] = ()
    """``clusters.NAME``: per-user settings of the manifest's clusters, by name."""
    power: PowerSettings = attrs.field(factory=PowerSettings)
    gates_severity: Mapping[str, str] = attrs.field(factory=lambda: MappingProxyType({}))
    """``gates.severity``: AR010/AR011/AR012 severities of this workspace (``{"AR010": "error"}``)."""

    def cluster(self, name: str) -> ClusterSettings:
        """The settings of cluster ``name`` (the defaults when none are given)."""
        return dict(self.clusters).get(name, ClusterSettings())


_SECTIONS = ("preflight", "device", "logs", "watchdog", "insights", "probe", "power", "gates")
_NESTED = ("preflight", "insights", "probe", "power")
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


_NON_EMPTY = string(min_length=1)
_PYTHON: Check[tuple[str, ...]] = one_of(
    _NON_EMPTY.map(lambda path: (path,)),
    list_of(_NON_EMPTY, min_length=1).map(tuple),
    expected="a path or a non-empty list of strings",
)
_COUNT = integer(minimum=0)
_POSITIVE = positive_number()
_GATE_SEVERITY: Check[Mapping[str, str]] = Check(
    lambda value: (
        isinstance(value, Mapping)
        and all(code in TUNABLE_GATES and level in GATE_SEVERITIES for code, level in value.items())
    ),
    'an object of AR010, AR011 or AR012 to "error", "warning" or "information"',
    lambda value: MappingProxyType(dict(value)),
)
_FRACTION = number(0, 1)
_WINDOW = integer(minimum=2)
"""A window of points: a median and a spread need at least two."""


_FIELDS: dict[str, tuple[str, Check[Any]]] = {
    "manifest": ("manifest", _NON_EMPTY),
    "stateDir": ("state_dir", _NON_EMPTY),
    "python": ("python", _PYTHON),
    "preflight.minFreeRamMb": ("preflight.min_free_ram_mb", _COUNT),
    "preflight.requirePluggedIn": ("preflight.require_plugged_in", BOOLEAN),
    "preflight.gpuContention": ("preflight.gpu_contention", choice("error", "warn", "off")),
    "preflight.minFreeDiskMb": ("preflight.min_free_disk_mb", _COUNT),
    "device.fp32Only": ("device_fp32_only", BOOLEAN.or_none()),
    "logs.notifyHz": ("logs_notify_hz", _POSITIVE),
    "logs.keepRunsMb": ("logs_keep_runs_mb", number(0, 2**40)),
    "logs.maxRunMb": ("logs_max_run_mb", number(0, 2**40)),
    "watchdog.stallSeconds": ("watchdog_stall_seconds", _POSITIVE),
    "insights.enabled": ("insights.enabled", BOOLEAN),
    "insights.lossSpikeWindow": ("insights.loss_spike_window", _WINDOW),
    "insights.lossSpikeMads": ("insights.loss_spike_mads", _POSITIVE),
    "insights.lossSpikeMinJump": ("insights.loss_spike_min_jump", _POSITIVE),
    "insights.lossSpikeHoldSeconds": ("insights.loss_spike_hold_seconds", _POSITIVE),
    "insights.gradWindow": ("insights.grad_window", _WINDOW),
    "insights.gradWarmupSteps": ("insights.grad_warmup_steps", _COUNT),
    "insights.gradClipFraction": ("insights.grad_clip_fraction", _FRACTION),
    "insights.gradParamRatio": ("insights.grad_param_ratio", _POSITIVE),
    "insights.gpuBubbleUtilization": ("insights.gpu_bubble_utilization", number(0, 100)),
    "insights.gpuBubbleWindowSeconds": ("insights.gpu_bubble_window_seconds", _POSITIVE),
    "insights.gpuBubbleFraction": ("insights.gpu_bubble_fraction", _FRACTION),
    "insights.gpuBubbleWarmupSeconds": ("insights.gpu_bubble_warmup_seconds", _POSITIVE),
    "insights.checkpointOverdueFactor": ("insights.checkpoint_overdue_factor", _POSITIVE),
    "insights.thermalMaxCelsius": ("insights.thermal_max_celsius", _COUNT.or_none()),
    "probe.allowWithoutGpu": ("probe.allow_without_gpu", BOOLEAN),
    "probe.sampleSeconds": ("probe.sample_seconds", _POSITIVE),
    "power.onBattery": ("power.on_battery", choice("stop", "warn", "ignore")),
    "power.graceSeconds": ("power.grace_seconds", number(minimum=0).map(float)),
    "power.resumeOnAc": ("power.resume_on_ac", BOOLEAN),
    "gates.severity": ("gates_severity", _GATE_SEVERITY),
}


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
    "python": ("python", _PYTHON),
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
