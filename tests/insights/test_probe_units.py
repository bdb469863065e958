"""The probe's verdict (pure) and the manifest's ``probe`` field."""

from __future__ import annotations

import json
from pathlib import Path

from arena_ls.lifecycle.probe import Peak, verdict
from arena_ls.manifest.loader import load_manifest_text


def judge(status: str = "succeeded", peak: Peak | None = None, allow: bool = False) -> tuple[bool, str]:
    return verdict(status=status, failure=None, peak=peak or Peak(), limit_mb=5120, allow_without_gpu=allow)


def measured(*readings: tuple[int | None, str | None]) -> Peak:
    peak = Peak()
    for used, error in readings:
        peak.add(used, error)
    return peak


def test_the_peak_is_the_highest_reading_within_or_above_the_limit() -> None:
    ok, message = judge(peak=measured((1200, None), (4800, None), (300, None)))
    assert ok and "4800 MB" in message
    ok, message = judge(peak=measured((4800, None), (5121, None)))
    assert not ok and "5121 MB" in message and "smaller micro-batch" in message


def test_a_probe_that_did_not_end_by_itself_fails_whatever_its_peak() -> None:
    ok, message = verdict(
        status="crashed", failure="oom: CUDA out of memory", peak=measured((100, None)),
        limit_mb=5120, allow_without_gpu=True,
    )  # fmt: skip
    assert not ok and "crashed (oom: CUDA out of memory)" in message


def test_no_gpu_fails_unless_waived_and_says_why() -> None:
    peak = measured((None, "NVIDIA driver not found"))
    ok, message = judge(peak=peak)
    assert not ok and "NVIDIA driver not found" in message and "allowWithoutGpu" in message
    ok, message = judge(peak=peak, allow=True)
    assert ok and "waived" in message


def test_a_trainer_off_the_gpu_passes_and_says_so() -> None:
    ok, message = judge(peak=measured((0, None)))
    assert ok and "no GPU memory" in message


def test_the_manifest_probe_field_and_its_errors(tmp_path: Path) -> None:
    jobs = [
        {"id": "a", "command": "{python}", "args": ["t.py"],
         "probe": {"args": ["t.py", "--steps", "30"], "maxVramMb": 4000, "required": True}},
        {"id": "b", "command": "{python}", "probe": {"maxVramMb": 0, "required": "yes", "extra": 1}},
        {"id": "c", "command": "{python}"},
    ]  # fmt: skip
    result = load_manifest_text(json.dumps({"version": 1, "jobs": jobs}), tmp_path / "m.json", tmp_path)
    a, c = result.jobs["a"], result.jobs["c"]
    assert (a.probe_args, a.probe_max_vram_mb, a.probe_required) == (("t.py", "--steps", "30"), 4000, True)
    assert (c.probe_args, c.probe_max_vram_mb, c.probe_required) == (None, 5120, False)
    messages = sorted((d.code, d.severity, d.message) for d in result.diagnostics if d.code == "AR102")
    assert messages == [
        ("AR102", "error", "`probe.maxVramMb` must be a positive integer"),
        ("AR102", "error", "`probe.required` must be true or false"),
        ("AR102", "warning", "unknown field `probe.extra` (ignored)"),
    ]
