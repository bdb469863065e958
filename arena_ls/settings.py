"""Typed settings (contract section 5), converted at the boundary.

Settings come from ``initializationOptions`` and ``workspace/configuration``
(section ``arena``). Bad values never crash the server: each one is reported
as a problem string and replaced by its default.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Literal

import attrs

GpuContention = Literal["error", "warn", "off"]


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
    logs_notify_hz: float = 10.0
    """At most this many ``arena/log`` notifications a second."""
    watchdog_stall_seconds: float = 600.0
    """A running trainer silent for this long is reported stalled."""


def _flatten(options: Mapping[str, Any]) -> dict[str, Any]:
    """Accept both nested (``{"preflight": {"minFreeRamMb": 1}}``) and dotted keys."""
    flat: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, Mapping) and key in ("preflight", "device", "logs", "watchdog"):
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            flat[key] = value
    return flat


def _check_str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("must be a non-empty string")
    return value


def _check_python(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ValueError("must be a path or a non-empty list of strings")


def _check_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("must be a non-negative integer")
    return value


def _check_positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError("must be a positive number")
    return float(value)


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _check_optional_bool(value: Any) -> bool | None:
    return None if value is None else _check_bool(value)


def _check_contention(value: Any) -> GpuContention:
    if value not in ("error", "warn", "off"):
        raise ValueError('must be "error", "warn" or "off"')
    result: GpuContention = value
    return result


_FIELDS: dict[str, tuple[str, Any]] = {
    "manifest": ("manifest", _check_str),
    "stateDir": ("state_dir", _check_str),
    "python": ("python", _check_python),
    "preflight.minFreeRamMb": ("preflight.min_free_ram_mb", _check_int),
    "preflight.requirePluggedIn": ("preflight.require_plugged_in", _check_bool),
    "preflight.gpuContention": ("preflight.gpu_contention", _check_contention),
    "preflight.minFreeDiskMb": ("preflight.min_free_disk_mb", _check_int),
    "device.fp32Only": ("device_fp32_only", _check_optional_bool),
    "logs.notifyHz": ("logs_notify_hz", _check_positive),
    "watchdog.stallSeconds": ("watchdog_stall_seconds", _check_positive),
}


def parse_settings(options: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Build settings from client options; return them and the problems found.

    Unknown keys are ignored; a key with a bad value keeps the default and
    adds a problem naming the key. ``options`` may be None or any JSON value.
    """
    settings = base or Settings()
    if options is None:
        return settings, []
    if not isinstance(options, Mapping):
        return settings, ["arena settings must be an object; using defaults"]
    if isinstance(options.get("arena"), Mapping):
        options = options["arena"]
    top: dict[str, Any] = {}
    pre: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in _flatten(options).items():
        if key not in _FIELDS:
            continue
        target, check = _FIELDS[key]
        try:
            checked = check(value)
        except ValueError as error:
            problems.append(f"arena.{key} {error}; using the default")
            continue
        if target.startswith("preflight."):
            pre[target.split(".", 1)[1]] = checked
        else:
            top[target] = checked
    if pre:
        top["preflight"] = attrs.evolve(settings.preflight, **pre)
    return attrs.evolve(settings, **top), problems
