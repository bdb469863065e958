"""Runs a restart of the machine interrupted (contract 8.3): the terminal's offer, and
``arena resume-interrupted`` (what the logon entry of ``arena autostart`` runs).

``RunInfo.afterReboot`` is ``{policy, step, offer, resumedBy, newerRun, problem}`` on a run
that ended ``crashed`` with ``failure.kind`` ``machine-restarted``; ``offer`` is
``Resume from step N`` while a person may resume it. With ``watchdog.afterReboot``
``resume`` the server resumes it by itself (once, across every server of the workspace);
this command then waits for that and says how it went.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from arena_ls.client.autostart import Autostart, resume_command
from arena_ls.client.errors import EXIT_FAILED, EXIT_OK, CliError
from arena_ls.client.lspclient import JsonRpcError, LspSession
from arena_ls.client.session import Options, connect
from arena_ls.client.visible_controls import visible
from arena_ls.wording import reboot_offer_message, say

RESUME_WAIT_SECONDS = 120.0
"""How long ``resume-interrupted`` waits for the server's own resume (a pre-flight, a start)."""
RESUME_POLL_SECONDS = 0.25


def after_reboot(run: dict[str, Any]) -> dict[str, Any] | None:
    value = run.get("afterReboot")
    return value if isinstance(value, dict) else None


def offers(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs whose resume a person may be offered (``afterReboot.offer`` set), oldest first."""
    return [run for run in runs if (after_reboot(run) or {}).get("offer")]


def offer_question(run: dict[str, Any]) -> str:
    """One run's offer in every client's words (``arena_ls.wording``): the run, why it was not
    resumed by itself, and the checkpoint it resumes from (contract 8.1: a ``{path}`` resume)."""
    info = after_reboot(run) or {}
    return reboot_offer_message(run) or f"{run.get('jobId')}: {info.get('offer')}?"


def offer_row(run: dict[str, Any]) -> str:
    """The offer in a cell of ``arena status``'s table (its title names the event): the button's
    words, the checkpoint, the command, and why the server did not resume it by itself."""
    info = after_reboot(run) or {}
    job, path, problem = run.get("jobId"), info.get("path"), info.get("problem")
    row = f"{job}: {info.get('offer')}"
    row += say("rebootFrom", path=path) if isinstance(path, str) and path else ""
    row += f" with `arena start {job} --start-step {info.get('step')}`"
    return row + (say("rebootNotResumed", problem=problem) if problem else "")


def offer_line(run: dict[str, Any]) -> str:
    """One run's offer, with the command that takes it."""
    info = after_reboot(run) or {}
    return (
        f"{offer_question(run)} `arena start {run.get('jobId')} --start-step {info.get('step')}` resumes it"
    )


def start_params(run: dict[str, Any]) -> dict[str, Any]:
    """``arena/start`` params that take a run's offer: its job, resumed at the offered step."""
    info = after_reboot(run) or {}
    return {"id": run.get("jobId"), "resume": True, "startStep": info.get("step")}


def settled(run: dict[str, Any]) -> bool:
    """The server's own resume of the run is done: it resumed it, or said why not."""
    info = after_reboot(run) or {}
    return bool(info.get("resumedBy") or info.get("problem") or info.get("newerRun"))


async def cmd_resume_interrupted(options: Options, args: argparse.Namespace) -> int:
    extra = {"watchdog": {"afterReboot": args.after_reboot}} if args.after_reboot else None
    async with connect(options, extra) as session:
        status = await session.request("arena/status", {})
        waiting = offers(_runs(status))
        if not waiting:
            print("no run is waiting for a resume after a restart", flush=True)
            return EXIT_OK
        policy = (after_reboot(waiting[0]) or {}).get("policy")
        if policy == "resume":
            return await _report_resumes(session, [run["runId"] for run in waiting])
        return await _offer(session, options, waiting)


async def _report_resumes(session: LspSession, run_ids: list[str]) -> int:
    """Wait for the server's resume of each run (``afterReboot.resumedBy`` or ``problem``)."""
    deadline = time.monotonic() + RESUME_WAIT_SECONDS
    runs: dict[str, dict[str, Any]] = {}
    while True:
        status = await session.request("arena/status", {})
        runs = {str(run.get("runId")): run for run in _runs(status)}
        waited = [runs.get(run_id) or {} for run_id in run_ids]
        if all(settled(run) for run in waited) or time.monotonic() > deadline:
            break
        await asyncio.sleep(RESUME_POLL_SECONDS)  # a poll with a deadline, not a guess
    code = EXIT_OK
    for run_id in run_ids:
        info = after_reboot(runs.get(run_id) or {}) or {}
        if info.get("resumedBy"):
            step = resumed_step(info, runs.get(str(info["resumedBy"])) or {})
            print(f"run {run_id} resumed from step {step} as run {info['resumedBy']}", flush=True)
        elif info.get("newerRun"):
            print(f"run {run_id}: its job was started again since (run {info['newerRun']})", flush=True)
        else:
            why = info.get("problem") or "no answer yet: another server may be resuming it"
            print(f"arena: run {run_id} was not resumed: {visible(str(why))}", file=sys.stderr, flush=True)
            code = EXIT_FAILED
    return code


def resumed_step(info: dict[str, Any], resumed: dict[str, Any]) -> object:
    """The step a resume after the restart started from: the resumed run's verified checkpoint
    once its agent has verified one (contract 8.2 may fall back to an earlier whole one), else
    the step the resume was launched at (``afterReboot.step``, fixed once resumed)."""
    verified = resumed.get("resumedFrom")
    if isinstance(verified, dict) and isinstance(verified.get("step"), int):
        return verified["step"]
    return info.get("step")


async def _offer(session: LspSession, options: Options, waiting: list[dict[str, Any]]) -> int:
    """``ask``: put each offer to the person at a terminal; elsewhere (at logon) print it."""
    for run in waiting:
        line = offer_line(run)
        if not options.interactive:
            print(visible(line), flush=True)
            continue
        if options.ask(visible(offer_question(run))):
            try:
                started = await session.request("arena/start", start_params(run))
            except JsonRpcError as error:
                raise CliError(f"the resume of {run.get('jobId')} was refused: {error.message}") from error
            print(f"started run {started.get('runId')}, resuming from step {start_params(run)['startStep']}")
    return EXIT_OK


def _runs(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [run for run in status.get("runs") or [] if isinstance(run, dict)]


async def cmd_autostart(options: Options, args: argparse.Namespace) -> int:
    entry = Autostart(options.root)
    if args.action == "install":
        where = entry.install(resume_command(options.root, args.after_reboot))
        print(f"at logon, `arena resume-interrupted` runs in {options.root}: {where}", flush=True)
    elif args.action == "remove":
        removed = entry.remove()
        print(f"removed {removed}" if removed else "no logon entry of this workspace to remove", flush=True)
    else:
        found = entry.status()
        print(f"installed: {found}" if found else f"not installed ({entry.kind})", flush=True)
    return EXIT_OK
