"""The device profile from the GPU's compute capability, and the setting that overrides it."""

from __future__ import annotations

import pytest

from arena_ls.health import describe_device_profile, fp32_only
from arena_ls.health.device import architecture

from .support import fake_gpu

PASCAL = fake_gpu(0, name="NVIDIA GeForce GTX 1080", capability=(6, 1))
AMPERE = fake_gpu(0, name="NVIDIA GeForce RTX 3090", capability=(8, 6))
UNREADABLE = fake_gpu(0, name="Mystery GPU", capability=None)


def test_pascal_is_fp32_only() -> None:
    assert fp32_only(None, [PASCAL]) is True


def test_ampere_is_not_fp32_only() -> None:
    assert fp32_only(None, [AMPERE]) is False


def test_volta_has_tensor_cores() -> None:
    assert fp32_only(None, [fake_gpu(0, capability=(7, 0))]) is False


@pytest.mark.parametrize("setting", [True, False])
def test_the_setting_overrides_the_gpu(setting: bool) -> None:
    assert fp32_only(setting, [PASCAL]) is setting
    assert fp32_only(setting, [AMPERE]) is setting
    assert fp32_only(setting, []) is setting


def test_unknown_without_gpu_or_capability() -> None:
    assert fp32_only(None, []) is None
    assert fp32_only(None, [UNREADABLE]) is None


def test_only_the_first_gpu_counts() -> None:
    assert fp32_only(None, [PASCAL, AMPERE]) is True
    assert fp32_only(None, [AMPERE, PASCAL]) is False


@pytest.mark.parametrize(
    ("capability", "name"),
    [
        ((3, 7), "Kepler"),
        ((5, 2), "Maxwell"),
        ((6, 1), "Pascal"),
        ((7, 0), "Volta"),
        ((7, 5), "Turing"),
        ((8, 0), "Ampere"),
        ((8, 6), "Ampere"),
        ((8, 9), "Ada Lovelace"),
        ((9, 0), "Hopper"),
        ((12, 0), "Blackwell"),
    ],
)
def test_architecture_names(capability: tuple[int, int], name: str) -> None:
    assert architecture(capability) == name


def test_descriptions() -> None:
    assert describe_device_profile(None, [PASCAL]) == "FP32-only (Pascal 6.1: no tensor cores)"
    assert describe_device_profile(None, [AMPERE]) == ("mixed precision allowed (Ampere 8.6: tensor cores)")
    assert describe_device_profile(True, [AMPERE]) == "FP32-only (set by arena.device.fp32Only)"
    assert describe_device_profile(False, [PASCAL]) == (
        "mixed precision allowed (set by arena.device.fp32Only)"
    )
    assert describe_device_profile(None, [], "NVIDIA driver not found") == (
        "unknown: NVIDIA driver not found"
    )
    assert describe_device_profile(None, []) == "unknown: no GPU found"
    assert "Mystery GPU" in describe_device_profile(None, [UNREADABLE])
