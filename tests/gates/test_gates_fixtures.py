"""One fixture trainer per pattern and rule: `fires_*` must report the rule of its folder,
`passes_*` must not (an information note is not a report); every fixture's findings are
pinned in the JSON snapshot next to it (regenerate with ARENA_UPDATE_SNAPSHOTS=1 and review
the diff). A fixture may name the manifest jobs that run it, one a line at its top:
`# arena-job: ID ARG...` (the arguments after the script, split as a shell would); it is
judged for them, as the server judges a trainer for the jobs of its manifest."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from arena_ls.gates import JobArgs, lint_trainer
from arena_ls.gates.registry import RULES
from tests.gates.support import FIXTURES, check_snapshot, snapshot_of

RULE_FIXTURES = sorted(FIXTURES.glob("ar*/*.py"))
CLEAN_FIXTURES = sorted(FIXTURES.glob("clean/*.py"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


JOB_LINE = "# arena-job:"


def fixture_jobs(path: Path) -> tuple[JobArgs, ...]:
    """The jobs a fixture names in its leading ``# arena-job: ID ARG...`` lines."""
    jobs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if line.startswith(JOB_LINE):
            words = shlex.split(line[len(JOB_LINE) :])
            jobs.append(JobArgs(words[0], tuple(words[1:])))
    return tuple(jobs)


@pytest.mark.parametrize("path", RULE_FIXTURES, ids=_id)
def test_rule_fixture(path: Path) -> None:
    code = path.parent.name.upper()
    findings = lint_trainer(path.read_bytes(), fp32_only=True, jobs=fixture_jobs(path))
    found = {finding.code for finding in findings if finding.severity != "information"}
    if path.stem.startswith("fires_"):
        assert code in found, f"{_id(path)} should fire {code}; got {sorted(found)}"
    else:
        assert path.stem.startswith("passes_"), "fixtures are named fires_* or passes_*"
        assert code not in found, f"{_id(path)} should not fire {code}"
    check_snapshot(path, snapshot_of(findings))


@pytest.mark.parametrize("path", CLEAN_FIXTURES, ids=_id)
def test_well_written_trainer_has_no_findings(path: Path) -> None:
    assert lint_trainer(path.read_bytes(), fp32_only=True) == []
    check_snapshot(path, [])


def test_every_rule_has_a_firing_and_a_passing_fixture() -> None:
    for code in RULES:
        if code == "AR000":
            continue
        folder = FIXTURES / code.lower()
        assert list(folder.glob("fires_*.py")), f"no fires_ fixture for {code}"
        assert list(folder.glob("passes_*.py")), f"no passes_ fixture for {code}"


def test_every_snapshot_has_its_fixture() -> None:
    for snapshot in FIXTURES.glob("*/*.json"):
        assert snapshot.with_suffix(".py").exists(), f"orphan snapshot {snapshot}"


def test_the_public_trainers_list_names_each_trainer_and_its_figures() -> None:
    """``tests/gates/public_trainers.json``: repo, path, a full commit and the figures; no code."""
    import json
    import re

    listed = json.loads((FIXTURES.parent / "public_trainers.json").read_text(encoding="utf-8"))["trainers"]
    assert len(listed) >= 15
    assert len({(item["repo"], item["path"]) for item in listed}) == len(listed)
    for item in listed:
        assert re.fullmatch(r"[0-9a-f]{40}", item["commit"]), item
        required = {
            "repo",
            "path",
            "commit",
            "style",
            "errors_on_main",
            "errors_now",
            "errors_after_quick_fixes",
            "quick_fixes_applied",
        }
        kit = {
            "kit_lines_to_pass",
            "kit_lines_note",
            "kit_call_lines",
            "kit_job_args",
            "kit_path",
            "errors_after_kit_lines",
        }
        assert required <= set(item) <= required | kit
        assert all(re.fullmatch(r"AR\d{3}", code) for code in item["errors_after_quick_fixes"])
