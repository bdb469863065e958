"""End-to-end: the Neovim plugin (editor-client/nvim) against a real arena-ls.

A headless Neovim loads the plugin, opens a workspace with a fixture
manifest, runs a job through the picker, watches its progress in the
statusline, follows its log, opens the status window, stops it, runs a job
that needs approval (answering the prompt), and waits for diagnostics on a
trainer that loses work. The Lua side (nvim_e2e.lua) waits for each event
with a deadline and writes what it saw as JSON; this test asserts on it.

One more case runs the reference trainer with ``runOn`` on the session's
Ray head (``ray_head`` in tests/conftest.py): progress, a stop with a
checkpoint, and a resume to success, as locally.

Skipped only when ``nvim`` is not installed (Debian: ``apt-get install -y neovim``);
the cluster case also when ``ray`` is not (like tests/cluster).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cluster.support import CLUSTER, REFERENCE_CKPT_EVERY, REFERENCE_LOG_EVERY, reference_workspace
from tests.cluster.support import options as cluster_options
from tests.helpers.fake_hardware import write_fake_hardware
from tests.helpers.rayhead import RayHead

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PLUGIN_DIR = REPO / "editor-client" / "nvim"
FIXTURES = HERE / "fixtures"
READY_JOB = "slow-task"
APPROVAL_JOB = "needs-approval"
BLOCKED_JOB = "broken-train"
TRAIN_JOB = "tiny-train"
NVIM_TIMEOUT_S = 420


def _manifest() -> dict[str, Any]:
    trainer_args = ["training/slow_trainer.py", "--steps", "2000", "--interval", "0.05"]
    trainer_args += ["--max-seconds", "300"]
    return {
        "version": 1,
        "jobs": [
            {
                "id": READY_JOB,
                "name": "Slow fixture task",
                "kind": "task",
                "command": "{python}",
                "args": trainer_args,
                "cwd": ".",
                "status": "ready",
                "stop": {"method": "file", "graceSeconds": 30},
            },
            {
                "id": APPROVAL_JOB,
                "name": "Fixture task that needs approval",
                "kind": "task",
                "command": "{python}",
                "args": trainer_args,
                "status": "approval-required",
                "stop": {"method": "file", "graceSeconds": 30},
            },
            {
                "id": BLOCKED_JOB,
                "name": "Trainer that loses work",
                "kind": "train",
                "command": "{python}",
                "args": ["training/broken/train.py"],
                "script": "training/broken/train.py",
                "status": "ready",
                "resume": {"args": ["--resume", "--start-step", "{step}"]},
            },
        ],
    }


def _make_workspace(root: Path) -> Path:
    training = root / "training"
    (training / "broken").mkdir(parents=True)
    shutil.copy(FIXTURES / "slow_trainer.py", training / "slow_trainer.py")
    shutil.copy(FIXTURES / "failing_train.py", training / "broken" / "train.py")
    (training / "manifest.json").write_text(json.dumps(_manifest(), indent=2), encoding="utf-8")
    return training / "broken" / "train.py"


def _settings() -> dict[str, Any]:
    """The server's settings; pre-flight thresholds low enough for a small CI machine."""
    return {
        "python": sys.executable,
        "preflight": {
            "minFreeRamMb": 64,
            "minFreeDiskMb": 16,
            "requirePluggedIn": False,
            "gpuContention": "off",
        },
    }


def _fixture_trainers(workspace: Path) -> list[psutil.Process]:
    """Processes running this workspace's fixture trainer."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        cmdline = process.info.get("cmdline") or []
        cwd = process.info.get("cwd") or ""
        runs_fixture = any(part.endswith("slow_trainer.py") for part in cmdline)
        if runs_fixture and cwd.startswith(str(workspace)):
            found.append(process)
    return found


def _wait_until_gone(workspace: Path, deadline_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + deadline_s
    left = _fixture_trainers(workspace)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [process for process in left if process.is_running()]
    return left


def _failure_context(tmp_path: Path, completed: subprocess.CompletedProcess[str] | None) -> str:
    parts = []
    if completed is not None:
        parts.append(f"nvim exit code {completed.returncode}")
        parts.append(f"nvim stdout/stderr:\n{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}")
    for log in tmp_path.glob("xdg/**/lsp.log"):
        parts.append(f"{log}:\n{log.read_text(errors='replace')[-6000:]}")
    return "\n".join(parts)


def _nvim_or_skip() -> str:
    nvim = shutil.which("nvim")
    if nvim is None:
        pytest.skip("nvim is not installed (Debian: apt-get install -y neovim)")
    return nvim


def _headless(nvim: str, script: Path) -> list[str]:
    return [nvim, "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {script}"]


def test_nvim_plugin_loads_and_formats(tmp_path: Path) -> None:
    """No server: commands exist; statusline, prompts and status lines read as documented."""
    nvim = _nvim_or_skip()
    results_path = tmp_path / "unit.json"
    env = dict(
        os.environ,
        ARENA_PLUGIN_DIR=str(PLUGIN_DIR),
        ARENA_UNIT_RESULTS=str(results_path),
        ARENA_WORDING_CASES=str(HERE / "fixtures" / "wording_cases.json"),
    )
    completed = subprocess.run(
        _headless(nvim, HERE / "nvim_unit.lua"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert results_path.exists(), f"no results; nvim said:\n{completed.stdout}\n{completed.stderr}"
    results = json.loads(results_path.read_text(encoding="utf-8"))
    assert not results.get("error"), results["error"]
    failed = [check for check in results["checks"] if not check["ok"]]
    assert not failed, failed
    assert len(results["checks"]) >= 30
    assert completed.returncode == 0, completed.stderr


LUA_MODULES = PLUGIN_DIR / "lua" / "arena"
PURE_MODULES = (
    "format",
    "laptop",
    "status_view",
    "refusals",
    "runs",
    "logstore",
    "worklost",
    "stderr",
    "util",
    "server_defaults",
    "wording",
)
"""The editor-free core: words and decisions, tables in and text out (docs/architecture.md)."""
GLUE_MODULES = (
    "init",
    "settings",
    "state",
    "client",
    "commands",
    "statusline",
    "logwin",
    "statuswin",
    "adopt",
)
EDITOR_API = re.compile(r"\bvim\.(api|lsp|ui|cmd|fn|schedule|defer_fn|notify|keymap|bo|wo|o|opt|b|w|g)\b")
MAX_MODULE_LINES = 400


def _lua_code(path: Path) -> str:
    """A Lua file without its comments (a comment may name an API the code does not call)."""
    return "\n".join(line.split("--", 1)[0] for line in path.read_text(encoding="utf-8").splitlines())


def test_nvim_plugin_is_in_modules_of_at_most_400_lines() -> None:
    sizes = {
        path.stem: len(path.read_text(encoding="utf-8").splitlines()) for path in LUA_MODULES.glob("*.lua")
    }
    assert set(PURE_MODULES) | set(GLUE_MODULES) <= set(sizes), sorted(sizes)
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert not too_long, too_long
    assert sizes["init"] <= 150, "init.lua is the entry point: setup{} and the API, the work lives in modules"


@pytest.mark.parametrize("name", PURE_MODULES)
def test_nvim_core_module_calls_no_editor_api(name: str) -> None:
    code = _lua_code(LUA_MODULES / f"{name}.lua")
    called = sorted({match.group(0) for match in EDITOR_API.finditer(code)})
    assert not called, f"arena.{name} is pure, yet calls {called}"
    required = set(re.findall(r'require\("arena\.(\w+)"\)', code))
    glue = sorted(required - set(PURE_MODULES))
    assert not glue, f"arena.{name} is pure, yet requires {glue}"


def _run_session(
    tmp_path: Path,
    workspace: Path,
    scenario: dict[str, Any],
    server_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Runs nvim_e2e.lua in a headless Neovim; returns its results once every check passed.

    ``server_env`` is added to Neovim's environment, which the server inherits.

    Whatever happens, no fixture trainer of this workspace outlives the test.
    """
    nvim = _nvim_or_skip()
    results_path = tmp_path / "results.json"
    config_path = tmp_path / "config.json"
    config = {
        "plugin_dir": str(PLUGIN_DIR),
        "workspace": str(workspace),
        "cmd": [sys.executable, "-m", "arena_ls"],
        "settings": _settings(),
        "results": str(results_path),
        **scenario,
    }
    config_path.write_text(json.dumps(config), encoding="utf-8")
    env = dict(os.environ, **(server_env or {}))
    env["ARENA_E2E_CONFIG"] = str(config_path)
    for variable in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[variable] = str(tmp_path / "xdg" / variable.lower())
    completed = None
    try:
        completed = subprocess.run(
            _headless(nvim, HERE / "nvim_e2e.lua"),
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=NVIM_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        context = _failure_context(tmp_path, None)
        pytest.fail(f"nvim did not finish in {NVIM_TIMEOUT_S} s\n{context}")
    finally:
        leftovers = _wait_until_gone(workspace, deadline_s=30)
        for process in leftovers:
            process.kill()

    context = _failure_context(tmp_path, completed)
    assert results_path.exists(), f"the Lua session wrote no results\n{context}"
    results: dict[str, Any] = json.loads(results_path.read_text(encoding="utf-8"))
    failed = {name: check for name, check in results["checks"].items() if not check["ok"]}
    error = results.get("error")
    assert not error and not failed, f"{error}\nfailed: {failed}\n{context}"
    assert results.get("finished") is True, context
    assert completed.returncode == 0, context
    left_pids = [process.pid for process in leftovers]
    assert not leftovers, f"fixture trainers still running after the session: {left_pids}"
    return results


@pytest.mark.timeout(NVIM_TIMEOUT_S + 60)
def test_nvim_plugin_runs_watches_and_stops_a_job(tmp_path: Path) -> None:
    workspace = (tmp_path / "ws").resolve()
    workspace.mkdir()
    failing_trainer = _make_workspace(workspace)
    results = _run_session(
        tmp_path,
        workspace,
        {
            "scenario": "main",
            "ready_job": READY_JOB,
            "approval_job": APPROVAL_JOB,
            "failing_trainer": str(failing_trainer),
        },
    )

    picker = {item["id"]: item for item in results["picker"]}
    assert picker[READY_JOB]["runnable"] is True
    assert picker[BLOCKED_JOB]["runnable"] is False
    assert picker[BLOCKED_JOB]["label"].startswith(f"⊘ {BLOCKED_JOB} blocked: AR")
    assert "AR004" in picker[BLOCKED_JOB]["label"]

    assert results["statusline"].startswith(f"⟳ {READY_JOB} ")
    assert results["raw_log_lines"] in ([], {}), "the trainer's @arena lines are hidden in the log window"
    assert "%" in results["statusline"] and "loss " in results["statusline"]
    assert results["statusline_eval"].startswith(f"⟳ {READY_JOB} ")

    assert results["stopped_run"]["status"] == "stopped"
    assert results["stopped_run"]["stoppedBy"] == "file"
    assert results["statusline_after_stop"].startswith(f"■ {READY_JOB} stopped")

    assert results["approval_prompt"] == f"Run {APPROVAL_JOB}? It needs approval. [y/N] "

    window = "\n".join(results["status_window"])
    assert f"▶ {READY_JOB} (task)" in window
    assert f"⊘ {BLOCKED_JOB} (train) blocked:\n      AR" in window

    codes = {diagnostic["code"] for diagnostic in results["diagnostics"]}
    assert "AR004" in codes, results["diagnostics"]

    progress = results["progress"]
    percentages = [p["percentage"] for p in progress if p.get("percentage") is not None]
    assert percentages, f"no $/progress report with a percentage reached Neovim: {progress}"


def _make_train_workspace(root: Path) -> None:
    """A `train` job whose gated script is the repository's reference trainer
    (which passes every gate) while the process it runs is the fixture trainer,
    which never announces a checkpoint: so stopping it is always refused with
    `no-checkpoint` (1007), with no race against a real trainer's first save.
    """
    training = root / "training"
    training.mkdir(parents=True)
    shutil.copy(FIXTURES / "slow_trainer.py", training / "slow_trainer.py")
    shutil.copy(REPO / "training" / "train.py", training / "train.py")
    args = ["training/slow_trainer.py", "--steps", "2000", "--interval", "0.05"]
    manifest = {
        "version": 1,
        "jobs": [
            {
                "id": TRAIN_JOB,
                "kind": "train",
                "command": "{python}",
                "args": [*args, "--max-seconds", "300"],
                "script": "training/train.py",
                "status": "ready",
                "resume": {"args": ["--resume", "--start-step", "{step}"]},
                "stop": {"method": "file", "graceSeconds": 30},
                "restart": {"maxRestarts": 0},
            }
        ],
    }
    (training / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")


@pytest.mark.timeout(NVIM_TIMEOUT_S + 60)
def test_nvim_stop_without_checkpoint_asks_before_losing_work(tmp_path: Path) -> None:
    workspace = (tmp_path / "ws").resolve()
    _make_train_workspace(workspace)
    results = _run_session(
        tmp_path,
        workspace,
        {"scenario": "confirm-stop", "ready_job": TRAIN_JOB, "answers": ["n", "y"]},
    )

    prompt = re.compile(
        r"This run has no checkpoint yet; stopping it now loses (\d+ (s|min)|less than 1 s) of training\. "
        r"Stop anyway\? \[y/N\] "
    )
    assert len(results["prompts"]) == 2, results["prompts"]
    assert all(prompt.fullmatch(said) for said in results["prompts"]), results["prompts"]
    assert results["stopped_run"]["status"] == "stopped"
    assert results["stopped_run"]["stoppedBy"] == "file"


PROBE_JOB = "lm"
PROBE_MB = 6000
INSIGHT_TRAINER = REPO / "tests" / "fixtures" / "trainers" / "insight_trainer.py"


def _make_probe_workspace(root: Path, hardware: Path) -> None:
    """A train job whose VRAM probe is required; the probe's trainer lists itself on the
    fake GPU (``--fake-gpu``) with more memory than the default limit (5120 MB)."""
    training = root / "training"
    training.mkdir(parents=True)
    shutil.copy(INSIGHT_TRAINER, training / "insight_trainer.py")
    trainer = "training/insight_trainer.py"
    probe_args = [trainer, "--steps", "30", "--interval", "0.03", "--fake-gpu", str(hardware), str(PROBE_MB)]
    manifest = {
        "version": 1,
        "jobs": [
            {
                "id": PROBE_JOB,
                "kind": "train",
                "command": "{python}",
                "args": [trainer, "--ckpt-every", "5"],
                "script": trainer,
                "status": "ready",
                "resume": {"args": ["--resume", "--start-step", "{step}"]},
                "probe": {"args": probe_args, "required": True},
            }
        ],
    }
    (training / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")


@pytest.mark.timeout(NVIM_TIMEOUT_S + 60)
def test_nvim_probe_command_and_probe_required(tmp_path: Path) -> None:
    """:ArenaProbe sends arena/start {probe: true} and shows the verdict; 1010 offers the probe."""
    workspace = (tmp_path / "ws").resolve()
    hardware = tmp_path / "hardware.json"
    write_fake_hardware(hardware, {"gpus": [], "gpuError": None})
    _make_probe_workspace(workspace, hardware)
    settings = {**_settings(), "probe": {"sampleSeconds": 0.05}}
    results = _run_session(
        tmp_path,
        workspace,
        {
            "scenario": "probe",
            "probe_job": PROBE_JOB,
            "probe_mb": PROBE_MB,
            "settings": settings,
            "cmd": [sys.executable, "-m", "tests.helpers.fake_server"],
            "answers": ["y"],
        },
        server_env={"ARENA_FAKE_HARDWARE": str(hardware), "PYTHONPATH": str(REPO)},
    )

    probe_runs = results["probe_runs"]
    assert probe_runs and all(run["jobId"] == f"{PROBE_JOB}.probe" for run in probe_runs), probe_runs
    verdict = f"Arena: {PROBE_JOB} probe failed ({PROBE_MB} MB): peak {PROBE_MB} MB is above the 5120 MB"
    assert len(results["verdicts"]) == 2 and all(v.startswith(verdict) for v in results["verdicts"]), results
    assert results["prompts"] == [
        f"{PROBE_JOB} needs a passing VRAM probe before it runs (its last probe failed: "
        f"{results['verdicts'][0].split(': ', 2)[2]}). Run the probe now? [y/N] "
    ]
    window = "\n".join(results["status_window"])
    assert f"▶ {PROBE_JOB} (train) ready · probe failed ({PROBE_MB} MB)" in window, window


MISSING_MODULE = "arena_ls_is_not_installed_here"


@pytest.mark.timeout(120)
def test_nvim_shows_why_the_server_died_on_start(tmp_path: Path) -> None:
    """A server that cannot start: the notification carries its last stderr lines."""
    workspace = (tmp_path / "ws").resolve()
    _make_workspace(workspace)
    results = _run_session(
        tmp_path,
        workspace,
        {"scenario": "dies-on-start", "cmd": [sys.executable, "-m", MISSING_MODULE]},
    )
    message = results["exit_message"]
    assert message.startswith("Arena: arena-ls exited with code 1"), message
    assert f"No module named {MISSING_MODULE}" in message, message


CLUSTER_JOB = "tiny-lm"
CLUSTER_STEPS = 300


@pytest.mark.timeout(NVIM_TIMEOUT_S + 60)
def test_nvim_runs_the_reference_job_on_the_cluster(tmp_path: Path, ray_head: RayHead) -> None:
    """The reference trainer with ``runOn: "lab"`` on the session's Ray head, from Neovim as
    locally: the statusline says ``tiny-lm @ lab`` with its progress, :ArenaStop stops it by
    signal with a checkpoint (no question: one was announced), :ArenaStatus shows the cluster's
    health, and :ArenaRun again resumes from that checkpoint on the cluster to success, its
    log showing every progress line from there once.

    Skipped like tests/cluster when ray is not installed (the ``ray_head`` fixture)."""
    workspace = reference_workspace((tmp_path / "ws").resolve(), CLUSTER_JOB, CLUSTER_STEPS)
    results = _run_session(
        tmp_path,
        workspace,
        {
            "scenario": "cluster",
            "ready_job": CLUSTER_JOB,
            "cluster": CLUSTER,
            "cluster_health": f"Cluster {CLUSTER}: 1 node, 2 CPUs, 0 GPUs",
            "last_line": "^done: %d+ steps in",
            "deadline_ms": 180000,
            "settings": {**_settings(), **cluster_options(ray_head)},
        },
    )

    place = f"{CLUSTER_JOB} @ {CLUSTER}"
    assert results["statusline"].startswith(f"⟳ {place} ") and "%" in results["statusline"], results
    stopped = results["stopped_run"]
    assert (stopped["status"], stopped["stoppedBy"]) == ("stopped", "signal"), stopped
    step = stopped["lastCheckpoint"]["step"]
    assert REFERENCE_CKPT_EVERY <= step < CLUSTER_STEPS, stopped
    assert results["prompts"] == [], "a checkpoint was announced: the stop asks nothing"
    assert results["statusline_after_stop"].startswith(f"■ {place} stopped"), results["statusline_after_stop"]
    window = "\n".join(results["status_window"])
    assert f"■ {place} stopped" in window, window

    final = results["final_run"]
    assert (final["status"], final["step"], final["cluster"]["name"]) == ("succeeded", CLUSTER_STEPS, CLUSTER)
    assert results["statusline_after"].startswith(f"✓ {place} succeeded"), results["statusline_after"]
    lines = results["log_lines"]
    assert any(re.match(rf"resumed from .* at step {step}$", line) for line in lines), lines
    step_line = re.compile(rf"^step (\d+)/{CLUSTER_STEPS} loss")
    progress = [int(m.group(1)) for line in lines if (m := step_line.match(line))]
    first = step + REFERENCE_LOG_EVERY - step % REFERENCE_LOG_EVERY
    assert progress == list(range(first, CLUSTER_STEPS + 1, REFERENCE_LOG_EVERY)), "each line once, in order"
