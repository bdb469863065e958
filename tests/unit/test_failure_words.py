"""A SIGKILL's words: the kernel's count of OOM kills tells a person's ``kill -9`` from an OOM."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_ls import platform
from arena_ls.lifecycle.failure import classify


def _killed(oom_kills: int | None) -> str:
    failure = classify(exit_code=None, signal_name="SIGKILL", tail=[], nan_evidence=None, oom_kills=oom_kills)
    assert failure is not None and failure.kind == "killed"
    return failure.evidence


def test_a_kill_9_with_no_oom_kill_meanwhile_is_not_called_an_oom() -> None:
    said = _killed(0)
    assert "the kernel's OOM killer ended nothing" in said
    assert "kill -9" in said


def test_a_kill_while_the_oom_killer_ended_a_process_says_out_of_memory() -> None:
    assert "OOM killer ended 1 process meanwhile" in _killed(1)
    assert "ended 3 processes" in _killed(3)


def test_unknown_counts_name_both_causes() -> None:
    said = _killed(None)
    assert "kill -9" in said and "OOM killer" in said


def test_exit_137_is_killed_too() -> None:
    failure = classify(exit_code=137, signal_name=None, tail=[], nan_evidence=None, oom_kills=0)
    assert failure is not None and failure.evidence.startswith("trainer was killed (exit code 137)")


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("nr_free_pages 12\noom_kill 7\npgfault 3\n", 7),
        ("nr_free_pages 12\n", None),  # a kernel before 4.13
        ("oom_kill x\n", None),  # damaged
        ("", None),
    ],
)
def test_the_oom_kill_count_is_read_from_vmstat(tmp_path: Path, text: str, count: int | None) -> None:
    vmstat = tmp_path / "vmstat"
    vmstat.write_text(text)
    assert platform.oom_kill_count(vmstat) == count


def test_an_unreadable_vmstat_is_unknown(tmp_path: Path) -> None:
    assert platform.oom_kill_count(tmp_path / "missing") is None


def test_windows_has_no_oom_killer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    vmstat = tmp_path / "vmstat"
    vmstat.write_text("oom_kill 4\n")
    monkeypatch.setattr(platform.processes.sys, "platform", "win32")
    assert platform.oom_kill_count(vmstat) is None
