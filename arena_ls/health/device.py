"""The device profile: may the trainer use mixed precision on this GPU?

Tensor cores arrived with Volta (compute capability 7.0). Pascal and older
GPUs run FP16 without them, often slower than FP32, and have no BF16 or TF32,
so the gate AR011 warns about mixed precision when the profile is FP32-only.
The setting ``device.fp32Only`` overrides what the GPU says.
"""

from __future__ import annotations

from collections.abc import Sequence

from arena_ls.health.model import Gpu

TENSOR_CORES_SINCE = 7
"""First compute capability major version with tensor cores (Volta)."""


def fp32_only(setting: bool | None, gpus: Sequence[Gpu]) -> bool | None:
    """The setting if given; else True below compute capability 7.0; None if unknown.

    Only the first GPU counts: it is the one a single-GPU trainer uses by default.
    """
    if setting is not None:
        return setting
    capability = gpus[0].compute_capability if gpus else None
    if capability is None:
        return None
    return capability[0] < TENSOR_CORES_SINCE


def architecture(capability: tuple[int, int]) -> str:
    """The NVIDIA architecture name of a compute capability, e.g. (6, 1) -> "Pascal"."""
    major, minor = capability
    if major == 7:
        return "Turing" if minor >= 5 else "Volta"
    if major == 8:
        return "Ada Lovelace" if minor >= 9 else "Ampere"
    names = {2: "Fermi", 3: "Kepler", 5: "Maxwell", 6: "Pascal", 9: "Hopper"}
    if major >= 10:
        return "Blackwell"
    return names.get(major, "unknown architecture")


def describe_device_profile(setting: bool | None, gpus: Sequence[Gpu], gpu_error: str | None = None) -> str:
    """One line for status displays, e.g. ``FP32-only (Pascal 6.1: no tensor cores)``."""
    if setting is not None:
        profile = "FP32-only" if setting else "mixed precision allowed"
        return f"{profile} (set by arena.device.fp32Only)"
    if not gpus:
        reason = gpu_error or "no GPU found"
        return f"unknown: {reason}"
    gpu = gpus[0]
    if gpu.compute_capability is None:
        return f"unknown: compute capability of {gpu.name} not readable"
    major, minor = gpu.compute_capability
    family = f"{architecture(gpu.compute_capability)} {major}.{minor}"
    if major < TENSOR_CORES_SINCE:
        return f"FP32-only ({family}: no tensor cores)"
    return f"mixed precision allowed ({family}: tensor cores)"
