"""The client's plain parts, without processes: framing, errors, formatting, following."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest

from arena_ls.client.commands import (
    checkpoint_paths,
    finished_all_steps,
    pick_run,
    probe_verdict,
    resume_text,
    verdict_since,
)
from arena_ls.client.errors import CliError, from_rpc_error
from arena_ls.client.follow import OnInterrupt, TerminalFollow
from arena_ls.client.lspclient import JsonRpcError, Notification, encode_message, read_message
from arena_ls.client.render import PlainFollowView, ProgressState, fmt_duration, plain_line
from arena_ls.client.session import find_root


async def test_framing_round_trips_a_message() -> None:
    reader = asyncio.StreamReader()
    message = {"jsonrpc": "2.0", "id": 1, "result": {"text": "loss 2.3 · ETA 9m"}}
    reader.feed_data(encode_message(message) + encode_message({"jsonrpc": "2.0", "method": "x"}))
    reader.feed_eof()
    assert await read_message(reader) == message
    assert await read_message(reader) == {"jsonrpc": "2.0", "method": "x"}
    assert await read_message(reader) is None


def test_refusals_become_one_line_with_the_reason_and_a_hint() -> None:
    message = "job 'x' needs approval: start it with approved: true"
    error = JsonRpcError(1002, message, {"reason": "approval-required"})
    cli = from_rpc_error(error)
    assert cli.exit_code == 1
    assert cli.message == "refused (approval-required): job 'x' needs approval; pass --approve"
    assert "approved" not in cli.message, "protocol words stay out of the CLI's text"


def test_no_checkpoint_says_the_minutes_lost() -> None:
    error = JsonRpcError(
        1007,
        "run r has announced no checkpoint: stopping it loses 600s of training; pass confirm",
        {"reason": "no-checkpoint", "runtimeSeconds": 600.0},
    )
    message = from_rpc_error(error).message
    assert message == (
        "refused (no-checkpoint): This run has no checkpoint yet; "
        "stopping it now loses 10 min of training; pass --confirm to stop anyway"
    )
    assert "\n" not in message


def test_bad_params_are_a_usage_error() -> None:
    assert from_rpc_error(JsonRpcError(-32602, "field `id` must be a string")).exit_code == 2


def test_progress_text_from_run_info_and_from_reports() -> None:
    state = ProgressState("Tiny LM")
    assert state.text() == "starting"
    state.apply_report({"kind": "report", "message": "step 1/10 · loss 2.00", "percentage": 10})
    assert state.text() == "step 1/10 · loss 2.00"
    assert state.completed() == (10.0, 100.0)
    state.apply_info(
        {"status": "running", "step": 120, "totalSteps": 2000, "loss": 2.3104,
         "stepsPerSecond": 3.2, "etaSeconds": 587.5}
    )  # fmt: skip
    assert state.text() == "step 120/2000 · loss 2.31 · 3.2 it/s · ETA 9m 48s"
    assert state.completed() == (120.0, 2000.0)
    state.apply_report({"kind": "report", "message": "step 200/2000 · loss 2.10", "percentage": 10})
    assert state.text() == "step 200/2000 · loss 2.10"
    assert state.completed() == (200.0, 2000.0)
    state.apply_info({"status": "running", "step": 210, "totalSteps": 2000, "stalled": True})
    assert state.text() == "step 210/2000 · loss 2.31 · 3.2 it/s · ETA 9m 48s · stalled"


def test_the_bar_is_empty_before_the_first_step_and_the_end_says_the_end() -> None:
    state = ProgressState("Tiny LM")
    assert state.completed() == (0.0, 1.0), "an empty bar, not rich's full-width pulse"
    state.apply_report({"kind": "begin", "title": "Tiny LM", "message": "starting"})
    assert state.completed() == (0.0, 1.0)
    state.apply_info({"status": "running", "step": None, "totalSteps": None})
    assert state.text() == "starting"
    state.apply_info({"status": "succeeded", "step": None, "totalSteps": None})
    assert state.text() == "no step reported"
    assert state.completed() == (0.0, 1.0)


def test_start_says_whether_it_resumes() -> None:
    resumed = {"jobId": "lm", "resumedFromStep": 169}
    assert resume_text(resumed) == (
        "resuming from the checkpoint at step 169 (`arena start lm --fresh` starts over)"
    )
    assert resume_text({"jobId": "lm", "resumedFromStep": None}) == "starting from step 0"
    assert resume_text({"jobId": "lm"}, fresh=True) == "starting from step 0 (--fresh)"


def test_the_demo_starts_over_only_after_a_run_that_finished_every_step() -> None:
    def status(*runs: dict[str, Any]) -> dict[str, Any]:
        return {"runs": [{"jobId": "tiny-lm", **r} for r in runs]}

    done = {"runId": "a", "status": "succeeded", "step": 600, "totalSteps": 600}
    assert finished_all_steps(status(done), "tiny-lm") == {"jobId": "tiny-lm", **done}
    stopped = {"runId": "b", "status": "stopped", "step": 169, "totalSteps": 600}
    assert finished_all_steps(status(done, stopped), "tiny-lm") is None
    short = {"runId": "c", "status": "succeeded", "step": 20, "totalSteps": None}
    assert finished_all_steps(status(short), "tiny-lm") is None
    assert finished_all_steps(status(done), "other") is None


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "?"), (5.4, "5s"), (61, "1m 01s"), (3600 * 2 + 120, "2h 02m")]
)
def test_durations(seconds: float | None, text: str) -> None:
    assert fmt_duration(seconds) == text


def test_plain_lines_mark_stderr_and_arena() -> None:
    assert plain_line({"stream": "stdout", "text": "hi"}) == "hi"
    assert plain_line({"stream": "stderr", "text": "oops"}) == "[stderr] oops"
    assert plain_line({"stream": "arena", "text": "run ended"}) == "[arena] run ended"


def test_plain_progress_lines_are_throttled() -> None:
    now = [0.0]
    out = io.StringIO()
    view = PlainFollowView(out, interval=3.0, clock=lambda: now[0])
    state = ProgressState("job", step=1, total=10)
    view.progress(state)
    state.step = 2
    now[0] = 1.0
    view.progress(state)
    now[0] = 3.5
    view.progress(state)
    assert out.getvalue().splitlines() == ["[progress] step 1/10", "[progress] step 2/10"]


def run(run_id: str, job_id: str, status: str = "succeeded") -> dict[str, Any]:
    return {"runId": run_id, "jobId": job_id, "status": status}


def test_pick_run_prefers_the_run_id_then_the_active_run_then_the_latest() -> None:
    runs = [run("a1", "a"), run("b1", "b"), run("a2", "a"), run("b2", "b", "running")]
    jobs = [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    status = {"active": runs[3], "runs": runs, "jobs": jobs}
    assert pick_run(status, run_id="a1")["runId"] == "a1"
    assert pick_run(status)["runId"] == "b2"
    assert pick_run(status, job="a")["runId"] == "a2"
    with pytest.raises(CliError, match="job c has no runs yet"):
        pick_run(status, job="c")
    with pytest.raises(CliError, match="no job 'd' in the manifest; known jobs: a, b, c"):
        pick_run(status, job="d")
    removed = {"active": None, "runs": runs, "jobs": jobs[2:]}
    assert pick_run(removed, job="a")["runId"] == "a2", "a job since removed keeps its runs"
    with pytest.raises(CliError, match="no run zz"):
        pick_run(status, run_id="zz")


def test_checkpoint_paths_resolve_against_the_job_folder(tmp_path: Path) -> None:
    metrics = {
        "checkpoints": [
            {"step": 100, "path": "ck/latest.pt"},
            {"step": 150, "path": "ck/best.pt"},
            {"step": 200, "path": "ck/latest.pt"},
        ]
    }
    info = {"lastCheckpoint": {"step": 200, "path": "ck/latest.pt"}}
    assert checkpoint_paths(info, metrics, tmp_path) == [
        (150, (tmp_path / "ck/best.pt").resolve()),
        (200, (tmp_path / "ck/latest.pt").resolve()),
    ]


def test_find_root_walks_up_to_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "manifest.json").write_text("{}")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_root(deep) == tmp_path.resolve()
    assert find_root(Path("/")) == Path("/").resolve()


# -- following with a scripted server ------------------------------------------------------


def line(seq: int) -> dict[str, Any]:
    return {"seq": seq, "stream": "stdout", "text": f"line {seq}", "at": None}


class ScriptedSession:
    """Answers ``arena/logs`` from a fixed log (pages of 2) and ``arena/status`` with ``runs``."""

    def __init__(self, log: list[dict[str, Any]], runs: list[dict[str, Any]]) -> None:
        self.log = log
        self.runs = runs
        self.notifications: asyncio.Queue[Notification] = asyncio.Queue()
        self.requests: list[tuple[str, Any]] = []

    async def request(self, method: str, params: Any = None) -> Any:
        self.requests.append((method, params))
        if method == "arena/status":
            return {"runs": self.runs}
        if method == "arena/logs":
            start = int(params["cursor"] or 0)
            page = self.log[start : start + 2]
            done = start >= len(self.log)
            return {"runId": "r", "lines": page, "cursor": str(start + len(page)), "done": done}
        if method == "arena/stop":
            return {"status": "stopping"}
        raise AssertionError(method)


class RecordingView:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.notes: list[str] = []

    def open(self) -> None: ...
    def close(self) -> None: ...
    def progress(self, state: ProgressState) -> None: ...

    def line(self, line: dict[str, Any]) -> None:
        self.lines.append(line["text"])

    def note(self, text: str) -> None:
        self.notes.append(text)


async def test_a_gap_or_a_summary_is_filled_from_arena_logs_and_nothing_repeats() -> None:
    log = [line(i) for i in range(8)]
    session = ScriptedSession(log[:2], [run("r", "j", "running")])
    view = RecordingView()
    following = TerminalFollow(session, view, run("r", "j", "running"), "Job j")  # type: ignore[arg-type]
    await following.catch_up()
    assert view.lines == ["line 0", "line 1"]
    session.log = log
    assert following.on_lines([line(1), line(2)]) is False  # 1 was printed: skipped
    assert following.on_lines([line(5)]) is True  # 3 and 4 are missing
    summary = {"seq": 5, "stream": "arena", "text": "… 2 lines not shown", "summary": True}
    assert following.on_lines([summary]) is True  # the rate bound left some out
    assert view.lines == ["line 0", "line 1", "line 2"]
    await following.catch_up()
    assert following.on_lines([line(6), line(7)]) is False  # already printed: skipped
    assert view.lines == [f"line {i}" for i in range(8)]


async def test_following_ends_with_the_final_status_and_the_whole_log() -> None:
    log = [line(i) for i in range(5)]
    final = {**run("r", "j", "stopped"), "stoppedBy": "file"}
    session = ScriptedSession(log, [run("r", "j", "running")])
    view = RecordingView()
    for method, params in (
        ("arena/log", {"runId": "r", "lines": [line(0)]}),
        ("arena/log", {"runId": "other", "lines": [line(9)]}),
        ("arena/statusChanged", final),
    ):
        session.notifications.put_nowait(Notification(method, params))
    following = TerminalFollow(session, view, run("r", "j", "running"), "Job j")  # type: ignore[arg-type]
    result = await asyncio.wait_for(following.run(), 30)
    assert (result.exit_code, result.detached, result.info["stoppedBy"]) == (0, False, "file")
    assert view.lines == [f"line {i}" for i in range(5)]
    assert session.notifications.empty()


def test_status_tables_show_gpus_their_processes_and_the_device_profile() -> None:
    from rich.console import Console

    from arena_ls.client.tables import print_status

    gpu = {
        "index": 0, "name": "Tesla P100", "utilization": 97, "memoryUsedMb": 11000,
        "memoryTotalMb": 16280, "temperature": 71, "computeCapability": "6.0",
        "processes": [{"pid": 4242, "usedMemoryMb": 10900, "ours": True}],
    }  # fmt: skip
    health = {
        "at": "2026-01-01T00:00:00Z",
        "ram": {"totalMb": 32000, "availableMb": 20000, "percent": 37.5},
        "cpu": {"percent": 12.0, "count": 8},
        "battery": {"percent": 80, "pluggedIn": False},
        "gpus": [gpu],
        "gpuError": None,
    }
    status = {
        "active": None,
        "runs": [],
        "jobs": [],
        "health": health,
        "deviceProfile": "fp32-only",
    }
    out = io.StringIO()
    print_status(Console(file=out, width=160, color_system=None), status)
    text = out.getvalue()
    assert "Tesla P100" in text and "11000/16280 MB" in text and "71°C" in text
    assert "4242: 10900 MB (ours)" in text
    assert "80% (on battery)" in text and "fp32-only" in text
    assert "no jobs in the manifest" in text and "no runs yet" in text


def test_the_step_reached_counts_a_later_checkpoint() -> None:
    from arena_ls.protocol.wire import _latest_step  # RunInfo.step is a wire shape
    from arena_ls.run.rundir import CheckpointRecord

    saved = CheckpointRecord(step=169, path="ckpt-169.pt", at=0.0)
    assert _latest_step(160, saved) == 169, "progress every 10 steps, a checkpoint at 169"
    assert _latest_step(175, saved) == 175
    assert _latest_step(None, saved) == 169
    assert _latest_step(12, None) == 12


async def test_ctrl_c_detaches_after_the_window_and_twice_within_it_stops() -> None:
    now = [100.0]
    session = ScriptedSession([], [run("r", "j", "running")])
    view = RecordingView()
    following = TerminalFollow(
        session,  # type: ignore[arg-type]
        view,
        run("r", "j", "running"),
        "Job j",
        clock=lambda: now[0],
        on_interrupt=OnInterrupt.DETACH_OR_STOP,
        window=2.0,
    )
    assert following._interrupt() is False and following.detach_at == 102.0
    assert view.notes[-1].startswith("detaching in 2 s; run r keeps going. Press Ctrl-C again")
    assert not [m for m, _ in session.requests if m == "arena/stop"], "one Ctrl-C stops nothing"
    now[0] = 101.5
    assert following._interrupt() is False and following.detach_at is None
    assert following.stop_task is not None
    await following.stop_task
    assert ("arena/stop", {"runId": "r", "confirm": True, "wait": False}) in session.requests
    assert following._interrupt() is True, "after the stop request, Ctrl-C detaches at once"
    result = await following._detach()
    assert result.detached and "is stopping" in view.notes[-1]


async def test_ctrl_c_while_re_attached_only_detaches() -> None:
    session = ScriptedSession([], [run("r", "j", "running")])
    view = RecordingView()
    following = TerminalFollow(session, view, run("r", "j", "running"), "Job j")  # type: ignore[arg-type]
    assert following._interrupt() is True
    result = await following._detach()
    assert result.detached and result.exit_code == 130
    assert view.notes == [
        "detached; run r keeps going. Re-attach with: arena logs -f j · stop it with: arena stop j"
    ]
    assert not [m for m, _ in session.requests if m == "arena/stop"]


def test_a_cluster_run_says_where_it_runs_in_the_terminal() -> None:
    from rich.console import Console

    from arena_ls.client.render import run_place
    from arena_ls.client.tables import active_table, runs_table

    lab = {"runId": "r-1", "jobId": "tiny-lm", "status": "running", "cluster": {"name": "lab", "kind": "ray"}}
    local = {"runId": "r-0", "jobId": "tiny-lm", "status": "succeeded", "cluster": None}
    assert run_place(lab) == "tiny-lm @ lab" and run_place(local) == "tiny-lm"
    assert run_place(lab, "Tiny LM") == "Tiny LM @ lab"
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(active_table(lab))
    console.print(runs_table([local, lab]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "r-1 (job tiny-lm @ lab)" in text and text.count("@ lab") == 2


class ProbeStatusSession:
    """``arena/status`` whose job ``lm`` shows an old verdict, then (from the second call) a new one."""

    def __init__(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.answers = [old, new]
        self.calls = 0

    async def request(self, method: str, params: Any = None) -> Any:
        assert method == "arena/status"
        probe = self.answers[min(self.calls, 1)]
        self.calls += 1
        return {"jobs": [{"id": "lm", "probe": probe}]}


async def test_a_probe_that_answered_before_it_started_waits_for_its_own_verdict() -> None:
    old = {"ok": False, "at": "2026-12-01T05:00:00.000Z", "message": "an earlier probe"}
    new = {"ok": True, "at": "2026-12-01T05:10:02.000Z", "message": "this probe"}
    since = verdict_since({"startedAt": None}, "2026-12-01T05:10:00.000Z")
    assert since == "2026-12-01T05:10:00.000Z"
    verdict = await probe_verdict(ProbeStatusSession(old, new), "lm", since)  # type: ignore[arg-type]
    assert verdict == new, "the earlier probe's verdict is not this one's"
    assert verdict_since({"startedAt": "2026-12-01T05:10:01.000Z"}, since) == "2026-12-01T05:10:01.000Z"


def test_arena_status_says_which_checkpoint_a_resume_took_and_why() -> None:
    """Contract 8.2: ``RunInfo.resumedFrom`` in the active table and in a run's summary line."""
    from rich.console import Console

    from arena_ls.client.render import resumed_from_text, run_summary
    from arena_ls.client.tables import active_table

    resumed = {
        "step": 20,
        "path": "ckpt-20.pt",
        "verified": "sha256",
        "skipped": [{"step": 40, "path": "ckpt-40.pt", "why": "is 3 bytes, 9 announced: torn or replaced"}],
    }
    words = (
        "step 20: ckpt-20.pt (verified by sha256); "
        "skipped step 40 (ckpt-40.pt): is 3 bytes, 9 announced: torn or replaced"
    )
    assert resumed_from_text(resumed) == words
    assert resumed_from_text(None) == "-" and resumed_from_text({"step": 5, "skipped": "junk"}).startswith(
        "step 5"
    )
    run = {"runId": "r", "jobId": "lm", "status": "running", "resumedFrom": resumed}
    assert "resumed from " + words in run_summary(run)
    console = Console(width=400, record=True)
    console.print(active_table(run))
    table = console.export_text()
    assert "resumed from" in table and "verified by sha256" in table
