"""``resume.args`` with ``{path}`` (contract 8.1): the one function that fills them, the argv every
launch builds from it, the launcher's reading of the spec, and AR106 accepting ``{path}``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_ls.agent.resume_args import ResumePathUnknown, fill, names_checkpoint, path_at, uses_path
from arena_ls.agent.trainer_start import recorded_argv, trainer_argv
from arena_ls.manifest import load_manifest_text
from arena_ls.run.rundir import CheckpointRecord

HF = ["--resume_from_checkpoint", "{path}"]


def record(step: int, path: str) -> CheckpointRecord:
    return CheckpointRecord(step=step, path=path, at=1.0)


def test_fill_puts_the_announced_path_and_its_step() -> None:
    args = ["--ckpt_path={path}", "--start-step", "{step}", "<step>"]
    assert fill(args, 40, "out/checkpoint-40") == [
        "--ckpt_path=out/checkpoint-40",
        "--start-step",
        "40",
        "40",
    ]


def test_a_path_is_put_as_it_was_announced_spaces_braces_and_all() -> None:
    """The path is one argument (never a shell): nothing in it is interpreted, not even ``{step}``."""
    path = "C:\\runs\\my run {step}\\checkpoint-7"
    assert fill(HF, 7, path) == ["--resume_from_checkpoint", path]


def test_no_path_known_is_refused_never_a_literal_placeholder() -> None:
    with pytest.raises(ResumePathUnknown, match="step 40"):
        fill(HF, 40, None)


def test_step_only_arguments_need_no_path() -> None:
    assert fill(["--resume", "--start-step", "{step}"], 5, None) == ["--resume", "--start-step", "5"]


def test_path_at_takes_the_checkpoint_at_that_step_only() -> None:
    run_last, job_last = record(30, "out/checkpoint-30"), record(20, "out/checkpoint-20")
    assert path_at(30, [run_last, job_last]) == "out/checkpoint-30"
    assert path_at(20, [run_last, job_last]) == "out/checkpoint-20"
    assert path_at(25, [run_last, job_last]) is None
    assert path_at(20, [None, record(20, "")]) is None  # an announcement without a path names none


def test_which_arguments_name_a_checkpoint() -> None:
    assert uses_path(HF) and not uses_path(["--start-step", "{step}"])
    assert all(names_checkpoint(a) for a in ("{step}", "<step>", "{path}", "--ckpt_path={path}"))
    assert not names_checkpoint("--resume")


def test_trainer_argv_resumes_with_the_path() -> None:
    argv = trainer_argv(["python", "train.py"], HF, 40, "out/checkpoint-40")
    assert argv == ["python", "train.py", "--resume_from_checkpoint", "out/checkpoint-40"]
    assert trainer_argv(["python", "train.py"], HF, None, None) == ["python", "train.py"]
    with pytest.raises(ResumePathUnknown):
        trainer_argv(["python", "train.py"], HF, 40, None)


def test_a_record_made_before_the_launch_never_carries_a_placeholder() -> None:
    assert recorded_argv(["python", "train.py"], HF, 40, None) == ["python", "train.py"]


def test_the_launcher_reads_the_path_from_the_specs_job_checkpoint(tmp_path: Path) -> None:
    from arena_ls.agent import trainer_start

    checkpoint = {"step": 40, "path": "out/checkpoint-40", "at": 1.0}
    assert trainer_start._spec_checkpoint_path(checkpoint, 40) == "out/checkpoint-40"
    assert trainer_start._spec_checkpoint_path(checkpoint, 39) is None
    assert trainer_start._spec_checkpoint_path({"step": 40, "path": 7}, 40) is None
    assert trainer_start._spec_checkpoint_path(None, 40) is None


def manifest_codes(tmp_path: Path, resume_args: list[str]) -> list[str]:
    (tmp_path / "train.py").write_text("print('hi')\n")
    job = {
        "id": "hf",
        "command": "{python}",
        "kind": "train",
        "status": "ready",
        "args": ["train.py"],
        "resume": {"args": resume_args},
    }
    text = json.dumps({"version": 1, "jobs": [job]})
    result = load_manifest_text(text, tmp_path / "manifest.json", tmp_path)
    return sorted(d.code for d in result.diagnostics)


@pytest.mark.parametrize(
    "resume_args",
    [HF, ["--ckpt_path", "{path}"], ["--ckpt_path={path}"], ["--resume", "--start-step", "{step}"]],
)
def test_ar106_accepts_path_as_it_accepts_step(tmp_path: Path, resume_args: list[str]) -> None:
    assert "AR106" not in manifest_codes(tmp_path, resume_args)


def test_ar106_still_fires_without_step_or_path(tmp_path: Path) -> None:
    assert "AR106" in manifest_codes(tmp_path, ["--resume_from_checkpoint", "latest"])


async def test_a_start_resumes_from_the_announced_path_and_refuses_a_step_without_one(tmp_path: Path) -> None:
    """Through a real server: the dry run of a resume names the last checkpoint's path; a confirmed
    start at a step whose checkpoint path is unknown is refused (-32602), nothing launched."""
    from tests.helpers.lsp import all_logs, job, make_workspace, start_server, stop_server, wait_status

    resume = {"args": ["--resume", "--start-step", "{step}", "--from", "{path}"]}
    spec = job("lm", "--steps", "10", "--ckpt-every", "5", kind="train", resume=resume)
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        final = await wait_status(client, run["runId"], "succeeded", "crashed")
        assert final["status"] == "succeeded"
        last = final["lastCheckpoint"]
        dry = await client.call("arena/start", {"id": "lm", "dryRun": True, "confirm": True})
        assert dry["argv"][-5:] == ["--resume", "--start-step", str(last["step"]), "--from", last["path"]]
        (info,) = [j for j in (await client.call("arena/status", {}))["jobs"] if j["id"] == "lm"]
        assert info["resumesFromPath"] is True and info["lastCheckpoint"]["path"] == last["path"]
        error = await client.call_error("arena/start", {"id": "lm", "startStep": 3, "confirm": True})
        assert error.code == -32602 and "{path}" in str(error) and "step 3" in str(error)
        status = await client.call("arena/status", {})
        assert status["active"] is None and len(status["runs"]) == 1
        # a real start too: the run record's argv is built with the path (it once raised there)
        resumed = await client.call("arena/start", {"id": "lm", "confirm": True})
        after = await wait_status(client, resumed["runId"], "succeeded", "crashed")
        assert after["status"] == "succeeded", after
        texts = [line["text"] for line in await all_logs(client, resumed["runId"])]
        argvs = [json.loads(t[len("argv: ") :]) for t in texts if t.startswith("argv: ")]
        assert [argv[-2:] for argv in argvs] == [["--from", last["path"]]], argvs
    finally:
        await stop_server(client)
