"""Who has the GPUs read before the gates judge a trainer (issue 38 item 7).

A new server reads the GPUs (the device profile) once its first status is answered
(``protocol/warmup.py``); the gates never judge a trainer before the profile is known. Where a
person waits for the answer, a start's verdict or an open editor's lint, the gates have the GPUs
read at once; the verdicts judged ahead of time (``errors``, ``warm``) only wait.
"""

from __future__ import annotations

from pathlib import Path

from arena_ls.gates.cache import TrainerGates
from tests.gates.test_gates_job_args import DIT_LIKE, manifest_for


class Profile:
    """The health service as the gates see it: asked to read the GPUs, and waited on."""

    def __init__(self) -> None:
        self.asked = 0
        self.waits: list[tuple[int, float | None]] = []

    def read_now(self) -> None:
        self.asked += 1

    def known(self, timeout_s: float | None) -> bool:
        self.waits.append((self.asked, timeout_s))
        return True


def _gates(root: Path, profile: Profile) -> tuple[TrainerGates, object]:
    (root / "train.py").write_text(DIT_LIKE, encoding="utf-8")
    manifest = manifest_for(root, [("dit", [])])
    gates = TrainerGates(
        root,
        lambda: manifest,  # type: ignore[arg-type,return-value]
        lambda: True,
        profile_known=profile.known,
        read_profile_now=profile.read_now,
    )
    return gates, manifest


def test_a_start_has_the_gpus_read_before_it_waits_for_them(tmp_path: Path) -> None:
    profile = Profile()
    gates, manifest = _gates(tmp_path, profile)

    gates.verdict(manifest.jobs["dit"])  # type: ignore[attr-defined]

    assert profile.asked >= 1
    assert profile.waits[0][0] == 1, "asked before the first wait"


def test_an_open_editors_lint_has_them_read(tmp_path: Path) -> None:
    profile = Profile()
    gates, _ = _gates(tmp_path, profile)

    gates.lint_file(str(tmp_path / "train.py"), DIT_LIKE)

    assert profile.asked == 1 and profile.waits[0][0] == 1


def test_the_verdicts_judged_ahead_of_time_only_wait(tmp_path: Path) -> None:
    profile = Profile()
    gates, manifest = _gates(tmp_path, profile)

    gates.warm([manifest.jobs["dit"]])  # type: ignore[attr-defined]
    gates.errors(manifest.jobs["dit"])  # type: ignore[attr-defined]

    assert profile.waits, "they wait for the profile"
    assert profile.asked == 0, "and leave its reading to the server (after its first status)"
