"""The sections of the settings (``power``, ``notify``, ``preflight``, ``insights``, ``probe``,
``clusters.NAME``) and the kinds of values settings take (contract section 5).

``settings.py`` holds ``Settings``, which gathers these sections beside the
top-level settings, and their parse; it re-exports every name here. A new
setting of a section is one field of its class below, made with
``setting(key, default, kind, description)`` (CONTRIBUTING.md: adding a setting).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs

from arena_ls.setting_decl import Kind, kind, setting
from arena_ls.validation import (
    BOOLEAN,
    Check,
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
