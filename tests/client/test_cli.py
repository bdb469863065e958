"""``arena`` end to end: real client processes, a real server child, real agents and trainers."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.client.support import (
    ARENA,
    WAIT,
    ArenaProcess,
    arena_env,
    one_line,
    run_arena,
    run_in,
    run_of,
    state_on_disk,
    status_json,
    stop_every_run,
    wait_for_status,
)
from tests.helpers.lsp import job, make_workspace

RUN_INFO_FIELDS = {
    "runId", "jobId", "status", "pid", "agentPid", "startedAt", "endedAt", "exitCode", "signal",
    "stoppedBy", "failure", "restarts", "step", "totalSteps", "loss", "stepsPerSecond",
    "etaSeconds", "stalled", "lastCheckpoint", "logPath",
}  # fmt: skip
ANSI = re.compile(r"\x1b\[")
POSIX_ONLY = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to one process is POSIX")


def start_follow(root: Path, job_id: str) -> subprocess.CompletedProcess[str]:
    return run_arena(root, "start", job_id, "--follow")


def started_run_id(output: str) -> str:
    match = re.search(r"started run (\S+)", output)
    assert match, output
    return match.group(1)


def numbered(text: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^numbered (\d+)$", text, re.MULTILINE)]


# -- start --follow ------------------------------------------------------------------------


def test_start_follow_of_a_quick_job_exits_0_and_prints_its_lines(workspace: Path) -> None:
    done = start_follow(workspace, "quick")
    assert done.returncode == 0, done.stderr
    assert numbered(done.stdout) == list(range(1, 16))
    assert "[arena] job exited with code 0" in done.stdout
    last = done.stdout.splitlines()[-1]
    assert re.match(r"run quick-\S+ succeeded · exit code 0 · step 15/15", last), last
    assert not ANSI.search(done.stdout + done.stderr)
    assert done.stderr == ""


def test_start_follow_of_a_crashing_job_exits_1_with_one_line(workspace: Path) -> None:
    done = start_follow(workspace, "exit3")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith("arena: run exit3-") and "crashed" in line and "exit code 3" in line
    assert "[arena] TRAINING_CRASHED: exit3 code 3" in done.stdout


def test_start_without_follow_returns_and_the_run_goes_on(workspace: Path) -> None:
    done = run_arena(workspace, "start", "slow")
    assert done.returncode == 0, done.stderr
    run_id = re.search(r"started run (\S+) of job slow \(pid \d+, agent pid \d+\)", done.stdout)
    assert run_id, done.stdout
    assert "arena logs -f slow" in done.stdout
    assert run_of(workspace, run_id.group(1))["status"] == "running"


def test_start_says_whether_it_resumes_and_from_which_step(workspace: Path) -> None:
    first = run_arena(workspace, "start", "ckpt-train")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[1] == "starting from step 0"
    run_id = started_run_id(first.stdout)
    wait_for_status(
        workspace,
        lambda status: run_in(status, run_id)["lastCheckpoint"] is not None,
        "a checkpoint",
        files_say=lambda root: state_on_disk(root, run_id).get("lastCheckpoint") is not None,
    )
    stopped = run_arena(workspace, "stop", "ckpt-train")
    assert stopped.returncode == 0, stopped.stderr
    final = run_of(workspace, run_id)
    saved = final["lastCheckpoint"]["step"]
    assert final["step"] >= saved, "the step never lags the checkpoint"
    assert final["resumedFromStep"] is None

    resumed = run_arena(workspace, "start", "ckpt-train")
    assert resumed.returncode == 0, resumed.stderr
    expected = f"resuming from the checkpoint at step {saved} (`arena start ckpt-train --fresh` starts over)"
    assert resumed.stdout.splitlines()[1] == expected
    assert run_of(workspace, started_run_id(resumed.stdout))["resumedFromStep"] == saved
    assert run_arena(workspace, "stop", "ckpt-train", "--kill").returncode == 0

    fresh = run_arena(workspace, "start", "ckpt-train", "--fresh")
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.splitlines()[1] == "starting from step 0 (--fresh)"


# -- options, pipes, help, git ------------------------------------------------------------


def test_options_before_the_subcommand_are_kept(workspace: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [*ARENA, "--root", str(workspace), "-v", "status", "--json"],
        capture_output=True, text=True, env=arena_env(), cwd=elsewhere, timeout=WAIT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {j["id"] for j in json.loads(done.stdout)["jobs"]} >= {"quick", "slow"}
    assert " INFO arena_ls" in done.stderr, "-v before the subcommand shows the server's log"


def test_a_reader_that_leaves_early_breaks_nothing(workspace: Path) -> None:
    assert run_arena(workspace, "start", "slow").returncode == 0
    process = subprocess.Popen(
        [*ARENA, "stop", "--confirm", "--root", str(workspace)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=arena_env(), cwd=workspace,
    )  # fmt: skip
    assert process.stdout is not None
    process.stdout.close()  # like `| head -0`: every write to stdout breaks the pipe
    _, err = process.communicate(timeout=WAIT)
    assert process.returncode == 0, err
    assert b"BrokenPipeError" not in err and b"Traceback" not in err and err == b""
    assert status_json(workspace)["runs"][-1]["status"] == "stopped"


def test_the_servers_help_is_plain_text() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "arena_ls", "--help"],
        capture_output=True, text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    assert done.returncode == 0
    assert "``" not in done.stdout and "arena-ls: the language server" in done.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_state_folder_stays_out_of_git_status(workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True, timeout=WAIT)
    assert start_follow(workspace, "quick").returncode == 0
    state = workspace / ".aide" / "training"
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        capture_output=True, text=True, cwd=workspace, timeout=WAIT, check=True,
    ).stdout  # fmt: skip
    assert "fake_trainer.py" in listed and ".aide" not in listed, listed


# -- status --------------------------------------------------------------------------------


def test_status_json_parses_and_has_the_contract_keys(workspace: Path) -> None:
    assert start_follow(workspace, "quick").returncode == 0
    status = status_json(workspace)
    assert {"active", "runs", "jobs", "health", "logs"} <= set(status)
    assert status["active"] is None
    assert set(status["runs"][-1]) >= RUN_INFO_FIELDS
    quick = next(j for j in status["jobs"] if j["id"] == "quick")
    assert {"id", "name", "kind", "status", "runnable", "blockedBy"} <= set(quick)
    assert {"at", "ram", "cpu", "battery", "gpus", "gpuError"} <= set(status["health"])


def test_status_table_is_plain_and_names_every_job(workspace: Path) -> None:
    done = run_arena(workspace, "status")
    assert done.returncode == 0, done.stderr
    assert not ANSI.search(done.stdout)
    for title in ("Jobs", "Active run", "Recent runs", "Health"):
        assert title in done.stdout
    for job_id in ("quick", "needs-ok", "train-slow"):
        assert job_id in done.stdout
    assert "approval-required" in done.stdout and "RAM" in done.stdout


def test_status_shows_the_active_run(workspace: Path) -> None:
    started = run_arena(workspace, "start", "slow")
    assert started.returncode == 0, started.stderr
    run_id = started_run_id(started.stdout)
    done = run_arena(workspace, "status")
    active = done.stdout.split("Active run", 1)[1].split("Recent runs", 1)[0]
    assert run_id in active and "running" in active


# -- refusals and usage --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["start", "nope"], "not-allowlisted"),
        (["start", "needs-ok"], "approval-required"),
        (["start", "off"], "disabled"),
    ],
)
def test_a_refusal_is_exit_1_and_one_line_naming_the_reason(
    workspace: Path, args: list[str], reason: str
) -> None:
    done = run_arena(workspace, *args)
    assert done.returncode == 1
    assert one_line(done.stderr).startswith(f"arena: refused ({reason}): ")
    assert done.stdout == ""
    assert "Traceback" not in done.stderr


def test_unknown_job_names_the_known_ones(workspace: Path) -> None:
    line = one_line(run_arena(workspace, "start", "nope").stderr)
    assert "no job 'nope'" in line and "quick" in line


def test_approve_starts_a_job_that_needs_approval(workspace: Path) -> None:
    done = run_arena(workspace, "start", "needs-ok", "--approve", "--follow")
    assert done.returncode == 0, done.stderr
    assert "succeeded" in done.stdout.splitlines()[-1]


def test_a_second_start_while_one_runs_is_refused(workspace: Path) -> None:
    assert run_arena(workspace, "start", "slow").returncode == 0
    done = run_arena(workspace, "start", "quick")
    assert done.returncode == 1
    assert one_line(done.stderr).startswith("arena: refused (already-running): ")


@pytest.mark.parametrize(
    "args",
    [
        ["start"],
        ["frobnicate"],
        ["start", "quick", "--fresh", "--start-step", "3"],
        ["stop", "--grace", "-1"],
    ],
)
def test_usage_errors_are_exit_2_and_one_line(workspace: Path, args: list[str]) -> None:
    done = run_arena(workspace, *args)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("arena")


# -- stop ----------------------------------------------------------------------------------


def test_stop_of_a_train_run_without_checkpoint_needs_confirm(workspace: Path) -> None:
    assert run_arena(workspace, "start", "train-slow").returncode == 0
    refused = run_arena(workspace, "stop")
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert line.startswith("arena: refused (no-checkpoint): ")
    loses = r"no checkpoint yet; stopping it now loses (\d+ (s|min)|less than 1 s) of training"
    assert re.search(loses, line), line
    assert "--confirm" in line
    assert status_json(workspace)["active"]["status"] == "running"

    stopped = run_arena(workspace, "stop", "--confirm", "--grace", "30")
    assert stopped.returncode == 0, stopped.stderr
    first = stopped.stdout.splitlines()[0]
    assert re.match(r"run train-slow-\S+ stopped \(by file\) · exit code 0", first), first
    assert "last lines:" in stopped.stdout and "stopping cooperatively" in stopped.stdout
    assert "@arena {" not in stopped.stdout, "the last lines hide announcements, as --follow does"


def test_stop_kill_and_stop_when_idle(workspace: Path) -> None:
    assert run_arena(workspace, "start", "slow").returncode == 0
    killed = run_arena(workspace, "stop", "slow", "--kill")
    assert killed.returncode == 0, killed.stderr
    assert "stopped (by kill)" in killed.stdout.splitlines()[0]
    idle = run_arena(workspace, "stop")
    assert (idle.returncode, idle.stdout.strip()) == (0, "nothing is running")


# -- Ctrl-C while following ----------------------------------------------------------------

LONG_WINDOW = {"ARENA_STOP_WINDOW_SECONDS": "600"}
"""The second Ctrl-C is sent after the first one's note is seen: no race with the window."""
DETACHING = r"^arena: detaching in \S+ s; run \S+ keeps going\. Press Ctrl-C again to stop it"


@POSIX_ONLY
def test_one_ctrl_c_detaches_from_a_started_run_and_leaves_it_going(workspace: Path) -> None:
    arena = ArenaProcess(workspace, "start", "slow", "--follow")
    try:
        run_id = arena.run_id()
        arena.wait_for_line(r"^\[progress\] step \d+")
        arena.process.send_signal(signal.SIGINT)
        arena.wait_for_line(DETACHING)
        assert arena.wait() == 130
    finally:
        arena.close()
    detached = (
        rf"^arena: detached; run {run_id} keeps going\. Re-attach with: arena logs -f slow · "
        r"stop it with: arena stop slow$"
    )
    assert re.search(detached, arena.stdout, re.MULTILINE), arena.stdout[-2000:]
    active = status_json(workspace)["active"]
    assert (active["runId"], active["status"], active["stoppedBy"]) == (run_id, "running", None)
    hint = "Ctrl-C: detach (the run goes on) · Ctrl-C twice: stop it (checkpoint and exit)"
    assert arena.out[2] == hint, arena.out[:4]


@POSIX_ONLY
def test_ctrl_c_twice_stops_the_run_cooperatively(workspace: Path) -> None:
    arena = ArenaProcess(workspace, "start", "slow", "--follow", env=LONG_WINDOW)
    try:
        run_id = arena.run_id()
        arena.wait_for_line(r"^\[progress\] step \d+")
        arena.process.send_signal(signal.SIGINT)
        arena.wait_for_line(r"^arena: detaching in 600 s")
        arena.process.send_signal(signal.SIGINT)
        arena.wait_for_line(r"^arena: stopping: asked the trainer of run \S+ to checkpoint and stop")
        assert arena.wait() == 0, arena.stderr
    finally:
        arena.close()
    final = run_of(workspace, run_id)
    assert (final["status"], final["stoppedBy"], final["exitCode"]) == ("stopped", "file", 0)
    assert arena.out[-2].startswith(f"run {run_id} stopped (by file)"), arena.out[-3:]
    assert re.fullmatch(r"stopped at step \d+; nothing lost \(checkpoint at step \d+\)", arena.out[-1])
    assert "stopping cooperatively" in arena.stdout
    assert "detached" not in arena.stdout


@POSIX_ONLY
def test_ctrl_c_after_the_stop_request_detaches_and_the_stop_stands(workspace: Path) -> None:
    arena = ArenaProcess(workspace, "start", "deaf", "--follow", env=LONG_WINDOW)
    try:
        run_id = arena.run_id()
        arena.wait_for_line(r"^\[progress\] step \d+")
        arena.process.send_signal(signal.SIGINT)
        arena.wait_for_line(r"^arena: detaching in")
        arena.process.send_signal(signal.SIGINT)
        arena.wait_for_line(r"^\[arena\] created the stop file")
        arena.process.send_signal(signal.SIGINT)
        assert arena.wait() == 130
    finally:
        arena.close()
    detached = (
        rf"detached; run {run_id} is stopping \(it checkpoints and exits\)\. "
        r"See it with: arena logs -f deaf"
    )
    assert re.search(detached, arena.stdout)
    active = status_json(workspace)["active"]
    assert active["runId"] == run_id and active["status"] == "stopping"
    killed = run_arena(workspace, "stop", "--kill", "--confirm")
    assert killed.returncode == 0, killed.stderr
    assert run_of(workspace, run_id)["stoppedBy"] == "kill"


@POSIX_ONLY
def test_ctrl_c_in_logs_follow_only_detaches(workspace: Path) -> None:
    started = run_arena(workspace, "start", "train-slow")
    assert started.returncode == 0, started.stderr
    run_id = started_run_id(started.stdout)
    arena = ArenaProcess(workspace, "logs", "train-slow", "-f", env=LONG_WINDOW)
    try:
        arena.wait_for_line(r"^\[progress\] step \d+")
        arena.process.send_signal(signal.SIGINT)
        assert arena.wait() == 130
    finally:
        arena.close()
    assert re.search(rf"^arena: detached; run {run_id} keeps going\.", arena.stdout, re.MULTILINE)
    assert "stopping" not in arena.stdout
    active = status_json(workspace)["active"]
    assert (active["runId"], active["status"], active["stoppedBy"]) == (run_id, "running", None)


# -- logs ----------------------------------------------------------------------------------


def test_logs_prints_every_numbered_line(workspace: Path) -> None:
    followed = start_follow(workspace, "quick")
    run_id = started_run_id(followed.stdout)
    for args in (["logs"], ["logs", "quick"], ["logs", "--run", run_id]):
        done = run_arena(workspace, *args)
        assert done.returncode == 0, done.stderr
        assert numbered(done.stdout) == list(range(1, 16))
        assert done.stdout.splitlines()[0].startswith("[arena] starting quick")
        assert "[arena] run ended: succeeded" in done.stdout


def test_logs_of_a_job_without_runs_is_one_line(workspace: Path) -> None:
    done = run_arena(workspace, "logs", "quick")
    assert done.returncode == 1
    assert one_line(done.stderr) == "arena: job quick has no runs yet"


def test_logs_follow_attaches_from_the_first_line_until_the_run_ends(workspace: Path) -> None:
    started = run_arena(workspace, "start", "slow")
    assert started.returncode == 0, started.stderr
    arena = ArenaProcess(workspace, "logs", "slow", "-f")
    try:
        arena.wait_for_line(r"^numbered 40$")
        stopped = run_arena(workspace, "stop", "slow", "--confirm")
        assert stopped.returncode == 0, stopped.stderr
        assert arena.wait() == 0, arena.stderr
    finally:
        arena.close()
    seen = numbered(arena.stdout)
    assert seen == list(range(1, len(seen) + 1)), "every line once, in order"
    assert arena.out[0].startswith("[arena] starting slow")
    assert "[arena] run ended: stopped" in arena.stdout
    assert re.match(r"run slow-\S+ stopped \(by file\)", arena.out[-2]), arena.out[-3:]
    assert re.fullmatch(r"stopped at step \d+; nothing lost \(checkpoint at step \d+\)", arena.out[-1])


# -- plot, demo, check ---------------------------------------------------------------------


def test_plot_writes_a_png(workspace: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="arena plot needs the extra `plot` (matplotlib)")
    assert start_follow(workspace, "quick").returncode == 0
    out = tmp_path / "plots" / "loss.png"
    done = run_arena(workspace, "plot", "quick", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert done.stdout.splitlines()[0] == f"wrote {out.resolve()}"


def test_plot_stitches_the_job_across_its_resumed_runs(workspace: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="arena plot needs the extra `plot` (matplotlib)")
    resumed_from = 0
    for _ in range(2):
        started = run_arena(workspace, "start", "ckpt-train")
        assert started.returncode == 0, started.stderr
        run_id = started_run_id(started.stdout)

        def saved_past(checkpoint: dict[str, Any] | None, after: int = resumed_from) -> bool:
            return checkpoint is not None and checkpoint["step"] > after

        wait_for_status(
            workspace,
            lambda status, run_id=run_id: saved_past(run_in(status, run_id)["lastCheckpoint"]),
            "a checkpoint past the resume point",
            files_say=lambda root, run_id=run_id: saved_past(
                state_on_disk(root, run_id).get("lastCheckpoint")
            ),
        )
        assert run_arena(workspace, "stop", "ckpt-train").returncode == 0
        resumed_from = run_of(workspace, run_id)["lastCheckpoint"]["step"]
    out = tmp_path / "curve.png"
    done = run_arena(workspace, "plot", "ckpt-train", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = done.stdout.splitlines()[1]
    stitched = r"2 runs of ckpt-train stitched by step \(1 resume, 0 relaunches, \d+ checkpoints"
    assert re.match(stitched, summary)


def test_plot_of_a_job_without_runs_is_one_line(workspace: Path) -> None:
    done = run_arena(workspace, "plot", "quick")
    assert done.returncode == 1
    assert one_line(done.stderr) == "arena: job quick has no runs yet"


def test_demo_follows_tiny_lm_and_shows_its_checkpoints(tmp_path: Path) -> None:
    tiny = job("tiny-lm", "--steps", "20", "--ckpt-every", "5", status="approval-required")
    root = make_workspace(tmp_path / "ws", [tiny])
    try:
        done = run_arena(root, "demo")
    finally:
        stop_every_run(root)
    assert done.returncode == 0, done.stderr
    assert re.search(r"run tiny-lm-\S+ succeeded · exit code 0", done.stdout)
    for step in (5, 10, 15, 20):
        assert f"  step {step}: {root.resolve() / f'ckpt-{step}.pt'}" in done.stdout
    assert done.stdout.splitlines()[-1] == f"latest checkpoint: {root.resolve() / 'ckpt-20.pt'} (step 20)"


def test_a_second_demo_trains_again_after_a_finished_run(tmp_path: Path) -> None:
    tiny = job("tiny-lm", "--steps", "10", "--ckpt-every", "5", "--numbered", kind="train")
    root = make_workspace(tmp_path / "ws", [tiny])
    try:
        first = run_arena(root, "demo")
        second = run_arena(root, "demo")
    finally:
        stop_every_run(root)
    assert first.returncode == 0, first.stderr
    assert "starting from step 0" in first.stdout.splitlines()
    assert second.returncode == 0, second.stderr
    lines = second.stdout.splitlines()
    assert re.match(r"tiny-lm already trained all 10 steps \(run tiny-lm-\S+\): training it again", lines[0])
    assert numbered(second.stdout) == list(range(1, 11)), "the second demo trains every step again"
    assert re.search(r"run tiny-lm-\S+ succeeded · exit code 0 · step 10/10", second.stdout)


def test_demo_without_tiny_lm_is_refused(workspace: Path) -> None:
    done = run_arena(workspace, "demo")
    assert done.returncode == 1
    assert one_line(done.stderr).startswith("arena: refused (not-allowlisted): no job 'tiny-lm'")


BAD_TRAINER = """\
import torch

def main():
    model = torch.nn.Linear(2, 2)
    for step in range(100):
        model(torch.zeros(2)).sum().backward()

main()
"""


def test_check_lints_a_trainer_and_the_manifest(workspace: Path) -> None:
    pytest.importorskip("arena_ls.gates.check", reason="arena check needs arena_ls.gates.check")
    (workspace / "bad_train.py").write_text(BAD_TRAINER)
    done = run_arena(workspace, "check", "bad_train.py", "--format", "json")
    assert done.returncode == 1, done.stderr
    codes = {item["code"] for item in json.loads(done.stdout)}
    assert {"AR004", "AR007", "AR008"} <= codes
    manifest = run_arena(workspace, "check")
    assert manifest.returncode == 0, manifest.stdout + manifest.stderr
    assert "AR109" in manifest.stdout and "manifest.json" in manifest.stdout
