"""``arena status`` shows insights and probe verdicts; ``arena start --probe``; 1010 as one line."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from arena_ls.client.cli import build_parser
from arena_ls.client.commands import start_params
from arena_ls.client.errors import from_rpc_error
from arena_ls.client.lspclient import JsonRpcError
from arena_ls.client.tables import print_status
from tests.client.support import WAIT, arena_env, status_json, stop_every_run
from tests.helpers.fake_hardware import write_fake_hardware
from tests.helpers.lsp import REPO, job, make_workspace
from tests.lsp.test_insights import INSIGHT_TRAINER


def status_with(active: dict[str, Any], jobs: list[dict[str, Any]]) -> str:
    status = {"active": active, "runs": [active], "jobs": jobs, "health": {}, "deviceProfile": None}
    out = io.StringIO()
    print_status(Console(file=out, width=220, color_system=None), status)
    return out.getvalue()


def test_status_shows_the_active_runs_insights_and_each_jobs_probe() -> None:
    spike = {
        "kind": "loss-spike", "severity": "warning", "since": "2026-11-30T20:00:00.000Z",
        "message": "loss spiked to 9.1 at step 40 (recent median 2.01): lower the learning rate",
    }  # fmt: skip
    active = {"runId": "lm-1", "jobId": "lm", "status": "running", "insights": [spike]}
    jobs = [
        {"id": "lm", "name": "LM", "kind": "train", "status": "ready", "runnable": True, "blockedBy": [],
         "probe": {"ok": False, "peakVramMb": 6000, "at": "2026-11-30T19:00:00Z", "message": "above"}},
        {"id": "other", "name": "Other", "kind": "task", "status": "ready", "runnable": True,
         "blockedBy": [], "probe": None},
    ]  # fmt: skip
    text = status_with(active, jobs)
    assert "warning loss-spike (since 2026-11-30T20:00:00.000Z): loss spiked to 9.1 at step 40" in text
    assert "failed (6000 MB)" in text


def test_start_probe_sends_probe_true() -> None:
    args = build_parser().parse_args(["start", "lm", "--probe"])
    assert start_params(args) == {"id": "lm", "approved": False, "probe": True}
    assert "probe" not in start_params(build_parser().parse_args(["start", "lm"]))


def test_probe_required_is_a_refusal_with_a_hint() -> None:
    error = JsonRpcError(1010, "job 'lm' needs a passing VRAM probe first", {"reason": "probe-required"})
    cli = from_rpc_error(error)
    assert cli.message.startswith("refused (probe-required): job 'lm' needs a passing VRAM probe")
    assert cli.message.endswith("run `arena start JOB --probe` first")


@pytest.mark.parametrize(
    ("megabytes", "passed", "message"),
    [
        (3000, True, "peak 3000 MB, within the 5120 MB limit"),
        (6000, False, "peak 6000 MB is above the 5120 MB limit (probe.maxVramMb)"),
    ],
)
def test_start_probe_follows_to_the_verdict_and_records_it(
    tmp_path: Path, megabytes: int, passed: bool, message: str
) -> None:
    """Seen preparing the real-GPU check: ``arena start JOB --probe`` returned at once, its server closed, and
    the verdict the server would have recorded at the probe's end was lost (``probe: null``).

    The probe's trainer lists itself on a fake GPU with ``megabytes`` (the server is the fake-hardware
    launcher), so each outcome is pinned: a pass on stdout with exit 0, a failure on stderr with exit 1.
    """
    hardware = tmp_path / "hardware.json"
    write_fake_hardware(hardware, {"gpus": [], "gpuError": None})
    probe = {"args": ["insight_trainer.py", "--steps", "30", "--interval", "0.03",
                      "--fake-gpu", str(hardware), str(megabytes)], "maxVramMb": 5120}  # fmt: skip
    root = make_workspace(tmp_path / "ws", [job("probed", "--steps", "3", probe=probe)])
    shutil.copy(INSIGHT_TRAINER, root / "insight_trainer.py")
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"probe": {"sampleSeconds": 0.05}, "preflight": {"gpuContention": "off"}}))
    env = {**arena_env(), "ARENA_FAKE_HARDWARE": str(hardware), "ARENA_SETTINGS": str(settings),
           "PYTHONPATH": str(REPO)}  # fmt: skip
    try:
        command = [sys.executable, "-m", "tests.helpers.fake_cli", "start", "probed", "--probe"]
        done = subprocess.run(
            [*command, "--root", str(root)], capture_output=True, text=True, env=env, cwd=root,
            timeout=WAIT, check=False,
        )  # fmt: skip
        verdict_line = f"probe {'passed' if passed else 'failed'}: {message}"
        shown, other = (done.stdout, done.stderr) if passed else (done.stderr, done.stdout)
        assert verdict_line in shown, done
        assert "probe passed" not in other and "probe failed" not in other, done
        assert done.returncode == (0 if passed else 1), done
        recorded = next(j for j in status_json(root)["jobs"] if j["id"] == "probed")["probe"]
        assert (recorded["ok"], recorded["peakVramMb"]) == (passed, megabytes), recorded
        assert recorded["message"].startswith(message), recorded
    finally:
        stop_every_run(root)
