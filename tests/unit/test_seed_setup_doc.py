"""docs/seed-setup.md says true things: the SOP's own entry and manifest, loaded as the page says.

The JSON blocks of the page are read from it (each after its ``<!-- name -->``
marker): the SOP's entry must be the SOP's, word for word; loaded, it is
AR114; its quick fix gives the page's fixed entry, a train job that loads and
whose argv is the one the page shows; the stages are listed blocked; every
setting the page names is a setting of the server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from arena_ls import settings
from arena_ls.agent.trainer_start import trainer_argv
from arena_ls.manifest import load_manifest_text
from arena_ls.manifest.loader import ManifestResult
from arena_ls.protocol.jobs import stage_infos
from tests.unit.test_seed_manifest import apply_fix, diags

DOC = Path(__file__).resolve().parents[2] / "docs" / "seed-setup.md"

SOP_ENTRY = """{"id": "pretrain", "name": "Continue pretraining",
 "command": "py", "args": ["-3.10", "-E", "E:\\\\train\\\\train.py", "--resume", "--start-step", "<step>"],
 "status": "approval-required"}"""
"""Step 1 of the SOP (``shared/seed/000_747b6b6d8e842f16.txt``), copied as it is written there."""


def block(name: str) -> str:
    match = re.search(rf"<!-- {name} -->\n```json\n(.*?)\n```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert match, f"docs/seed-setup.md has no {name} block"
    return match.group(1)


def load(root: Path, text: str) -> ManifestResult:
    (root / "training").mkdir(parents=True, exist_ok=True)
    return load_manifest_text(text, root / "training" / "manifest.json", root)


def on_this_machine(text: str, folder: Path) -> str:
    """The page's manifest with ``E:\\train`` where a folder of this machine is."""
    return text.replace('"E:/train"', json.dumps(str(folder))).replace(
        "E:\\\\train\\\\train.py", json.dumps(str(folder / "train.py"))[1:-1]
    )


def test_the_page_quotes_the_sops_entry_as_it_is() -> None:
    assert block("sop-entry") == SOP_ENTRY
    assert SOP_ENTRY.replace("\n", "").replace(" ", "") in block("seed-manifest").replace("\n", "").replace(
        " ", ""
    )


def test_the_sops_entry_is_ar114_and_its_fix_is_the_pages_train_job(tmp_path: Path) -> None:
    text = block("seed-manifest")
    result = load(tmp_path, text)
    [ar114] = diags(result, "AR114")
    assert ar114.severity == "warning" and "`pretrain`" in ar114.message
    fixed_text = apply_fix(text, ar114)
    fixed = json.loads(fixed_text)
    assert next(job for job in fixed["jobs"] if job["id"] == "pretrain") == json.loads(
        block("sop-entry-fixed")
    )
    again = load(tmp_path, fixed_text)
    assert not diags(again, "AR114") and not diags(again, "AR106")
    # E:\train is not on this machine: its trainer is missing, nothing else is wrong.
    assert {d.code for d in again.job_diagnostics["pretrain"] if d.is_error} == {"AR107"}


def test_on_a_machine_with_the_trainer_folder_the_fixed_job_loads_gated_and_resumable(tmp_path: Path) -> None:
    workspace = tmp_path / "aide-sovereign-workbench"
    folder = tmp_path / "E" / "train"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text("print('the trainer')\n")
    text = on_this_machine(block("seed-manifest"), folder)
    [ar114] = diags(load(workspace, text), "AR114")
    result = load(workspace, apply_fix(text, ar114))
    assert not result.errors, result.errors
    job = result.jobs["pretrain"]
    assert job.kind == "train" and job.status == "approval-required" and result.approval == "always"
    assert result.jobs["verify-release"].status == "approval-required"
    script = str(folder / "train.py")
    assert job.resolved_script(workspace) == folder / "train.py"
    assert trainer_argv(job.argv(["unused"]), job.resume_args, None) == [
        "py",
        "-3.10",
        "-E",
        "-u",
        "-X",
        "utf8",
        script,
    ]
    assert trainer_argv(job.argv(["unused"]), job.resume_args, 500) == [
        "py", "-3.10", "-E", "-u", "-X", "utf8", script, "--resume", "--start-step", "500"
    ]  # fmt: skip


def test_the_stages_are_listed_blocked_and_the_one_that_is_a_job_is_not(tmp_path: Path) -> None:
    result = load(tmp_path, block("seed-manifest"))
    infos = stage_infos(result)
    assert [(i["id"], i["status"], i["runnable"]) for i in infos] == [("posttrain", "stage", False)]
    [blocked] = infos[0]["blockedBy"]
    assert blocked["code"] == "AR115" and "no command" in blocked["message"]
    assert "pretrain" in result.all_ids


def test_the_page_names_only_real_settings_and_all_eight_rules() -> None:
    text = DOC.read_text(encoding="utf-8")
    sections = "preflight|power|gates|logs|watchdog|device|insights|notify"
    named = set(re.findall(rf"`((?:{sections})\.[A-Za-z]+)`", text))
    assert named >= {"power.onBattery", "power.graceSeconds", "power.resumeOnAc", "gates.severity",
                     "power.keepAwake", "notify.desktop", "notify.command"}  # fmt: skip
    assert named <= set(settings._FIELDS), named - set(settings._FIELDS)
    rows = re.findall(r"^\| ([1-8]) \|", text, re.MULTILINE)
    assert rows == [str(n) for n in range(1, 9)]
