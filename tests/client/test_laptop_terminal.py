"""The terminal's side of the laptop (contract 8.3): the offer of a run a restart interrupted in
``arena status`` and ``arena resume-interrupted``, the run record's column, the plot's subtitle,
and the ``autostart`` and ``resume-interrupted`` arguments."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from arena_ls.client.cli import build_parser
from arena_ls.client.interrupted import offer_line, offers, settled, start_params
from arena_ls.client.plot import code_subtitle
from arena_ls.client.tables import print_status, record_text


def interrupted(run_id: str, **after: Any) -> dict[str, Any]:
    info = {
        "policy": "ask",
        "step": 500,
        "offer": "Resume from step 500",
        "resumedBy": None,
        "newerRun": None,
    }
    info["problem"] = None
    info.update(after)
    return {
        "runId": run_id,
        "jobId": "tiny-lm",
        "status": "crashed",
        "failure": {"kind": "machine-restarted", "evidence": "the machine restarted since the run started"},
        "afterReboot": info,
    }


def test_the_offer_says_the_command_that_takes_it() -> None:
    run = interrupted("r1")
    assert offer_line(run) == (
        "tiny-lm was interrupted by a restart of the machine (run r1). Resume from step 500? "
        "`arena start tiny-lm --start-step 500` resumes it"
    )
    assert "(run r1). It was not resumed by itself: pre-flight failed. Resume from step 500?" in offer_line(
        interrupted("r1", policy="resume", problem="pre-flight failed")
    )
    assert start_params(run) == {"id": "tiny-lm", "resume": True, "startStep": 500}
    assert "Resume from step 500 (its checkpoint out/checkpoint-500)? `arena start" in offer_line(
        interrupted("r1", path="out/checkpoint-500")
    )


def test_only_runs_with_an_offer_are_offered_and_a_resume_is_settled_once_told() -> None:
    runs = [
        interrupted("a"),
        interrupted("b", offer=None, resumedBy="c"),
        interrupted("d", policy="never", offer=None),
        {"runId": "e", "jobId": "x", "status": "succeeded", "afterReboot": None},
    ]
    assert [run["runId"] for run in offers(runs)] == ["a"]
    assert not settled(interrupted("a"))
    assert settled(interrupted("a", resumedBy="z")) and settled(interrupted("a", problem="refused"))
    assert settled(interrupted("a", newerRun="y"))


def test_arena_status_lists_the_offer_and_each_runs_code() -> None:
    recorded = {
        "runId": "r0",
        "jobId": "tiny-lm",
        "status": "succeeded",
        "record": {
            "git": {"commit": "0123456789abcdef", "dirty": True},
            "python": {"path": "py", "version": "3.10"},
        },
    }
    status = {"active": None, "runs": [recorded, interrupted("r1")], "jobs": [], "health": {}}
    out = io.StringIO()
    print_status(Console(file=out, width=220, color_system=None), status)
    text = out.getvalue()
    assert "Interrupted by a restart of the machine" in text
    assert "tiny-lm: Resume from step 500 with `arena start tiny-lm --start-step 500`" in text
    assert "0123456789ab (dirty)" in text


def test_the_record_in_a_line() -> None:
    record = {"git": {"commit": "abc", "dirty": False}, "python": {"path": "py -3.10", "version": "3.10"}}
    assert record_text(record) == "abc · python 3.10"
    assert (
        record_text({"git": None, "python": {"path": "p", "version": None}})
        == "not in a git repository · python"
    )
    assert record_text(None) == "-"


def test_the_plot_subtitle_has_the_commit_and_dirty_and_earlier_commits() -> None:
    def run(commit: str | None, dirty: bool) -> dict[str, Any]:
        return {"runId": "r", "record": {"git": {"commit": commit, "dirty": dirty}}}

    assert code_subtitle([run("aaaa", False), run("bbbbbbbbbbbbbbbb", True)]) == (
        "code bbbbbbbbbbbb (dirty) · earlier runs: aaaa"
    )
    assert code_subtitle([run("aaaa", False), run("aaaa", False)]) == "code aaaa"
    assert code_subtitle([{"runId": "r", "record": {"git": None}}, {"runId": "s"}]) is None


def test_the_laptop_commands_parse() -> None:
    parser = build_parser()
    args = parser.parse_args(["autostart", "install", "--after-reboot", "resume"])
    assert (args.command, args.action, args.after_reboot) == ("autostart", "install", "resume")
    args = parser.parse_args(["resume-interrupted"])
    assert (args.command, args.after_reboot) == ("resume-interrupted", None)
