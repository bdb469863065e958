"""The commands that talk to the server: start, stop, status, logs, demo, plot.

Each one opens a session with a child ``arena-ls``, makes its requests like
any editor would, prints, and returns the exit status. Refusals and server
errors are raised (``JsonRpcError``) and printed as one line by ``cli``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena_ls.client.announcements import shown
from arena_ls.client.asks import ALREADY_FINISHED, Question, lost_line, start_question, stop_question
from arena_ls.client.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, CliError
from arena_ls.client.follow import FollowResult, OnInterrupt, follow_run
from arena_ls.client.keep_awake import REASON_LOG_LINES, keep_awake_reason, needs_reason
from arena_ls.client.lspclient import JsonRpcError, LspSession
from arena_ls.client.manifest_state import manifest_path, manifest_problem
from arena_ls.client.metrics_all_pages import read_all_metrics
from arena_ls.client.render import (
    OK_STATUSES,
    make_follow_view,
    print_line,
    run_place,
    run_summary,
    write_line,
    write_plain,
)
from arena_ls.client.session import Options, connect, init_options
from arena_ls.client.tables import BROKEN_MANIFEST, NO_JOBS, print_status
from arena_ls.client.visible_controls import visible
from arena_ls.timeutil import iso_utc_now

if TYPE_CHECKING:
    from arena_ls.client.plot import JobCurve

DEMO_JOB = "tiny-lm"
INTERRUPT_HINT = "Ctrl-C: detach (the run goes on) · Ctrl-C twice: stop it (checkpoint and exit)"
PAGE_LIMIT = 1000


# -- start ---------------------------------------------------------------------------------


def start_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"id": args.job, "approved": bool(args.approve)}
    if getattr(args, "confirm", False):
        params["confirm"] = True
    if getattr(args, "probe", False):
        params["probe"] = True
    if args.fresh:
        params["resume"] = False
    if args.start_step is not None:
        params["resume"] = True
        params["startStep"] = args.start_step
    return params


async def cmd_start(options: Options, args: argparse.Namespace) -> int:
    async with connect(options) as session:
        requested_at = iso_utc_now()
        params = start_params(args)
        info = await request_asking(session, options, "arena/start", params, start_question)
        announce_start(options, info, fresh=bool(args.fresh))
        if getattr(args, "probe", False):
            return await follow_probe(session, options, info, args.job, requested_at)
        if not args.follow:
            write_plain(options.console, f"follow it with: arena logs -f {info.get('jobId')}")
            return EXIT_OK
        write_plain(options.console, INTERRUPT_HINT)
        result = await follow_and_report(
            session, options, info, OnInterrupt.DETACH_OR_STOP, raw=bool(getattr(args, "raw", False))
        )
        return result.exit_code


MAX_QUESTIONS = 3
"""Refusals one request may put to the person before the client gives up (each answer
changes the request, so a server that kept refusing would otherwise ask forever)."""

QuestionFor = Callable[[JsonRpcError, dict[str, Any], _dt.datetime], Question | None]


async def request_asking(
    session: LspSession, options: Options, method: str, params: dict[str, Any], question_for: QuestionFor
) -> Any:
    """``method`` with ``params``; a refusal that is a question (see ``asks``) is put to the
    person on a terminal and, on yes, the request is sent again with what they agreed to.
    Without a terminal it is one ``arena:`` line saying what to type instead, exit 1."""
    for _ in range(MAX_QUESTIONS):
        try:
            return await session.request(method, params)
        except JsonRpcError as error:
            question = question_for(error, params, _dt.datetime.now(tz=_dt.timezone.utc))
            if question is None:
                raise
            put_to_the_person(options, error, question)
            params = question.retried(params)
    return await session.request(method, params)


def put_to_the_person(options: Options, error: JsonRpcError, question: Question) -> None:
    """Ask on a terminal; returns on yes, raises the refusal when no one can be asked or on no."""
    reason = error.reason or str(error.code)
    if not options.interactive:
        raise CliError(f"refused ({reason}): {question.refusal()}")
    write_plain(options.console, question.warning)
    if not options.ask(question.question):
        raise CliError(f"refused ({reason}): nothing done (you answered no)")


PROBE_VERDICT_WAIT_S = 30.0
"""How long to wait, after a probe's run ended, for the server to record its verdict."""


async def follow_probe(
    session: LspSession, options: Options, info: dict[str, Any], job_id: str, requested_at: str
) -> int:
    """Follow a probe to its verdict, print it, and exit 0 only when it passed.

    The server that started a probe measures its VRAM while it runs and records
    the verdict when it ends; a client that left at once would close that server
    and the verdict with it, so ``--probe`` always follows.
    """
    result = await follow_and_report(session, options, info, OnInterrupt.DETACH_OR_STOP)
    if result.detached:
        print(
            "arena: the probe goes on, but no verdict is recorded without a server watching it",
            file=sys.stderr,
            flush=True,
        )
        return result.exit_code
    verdict = await probe_verdict(session, job_id, verdict_since(info, requested_at))
    if verdict is None:
        print(f"arena: the probe of {visible(job_id)} ended without a verdict", file=sys.stderr, flush=True)
        return EXIT_FAILED
    line = f"probe {'passed' if verdict.get('ok') else 'failed'}: {verdict.get('message')}"
    if verdict.get("ok"):
        write_plain(options.console, line)
        return EXIT_OK
    print(f"arena: {visible(line)}", file=sys.stderr, flush=True)
    return EXIT_FAILED


def verdict_since(info: dict[str, Any], requested_at: str) -> str:
    """The earliest time a verdict of this probe can bear: its start, or (a run that answered
    before it started) the moment it was asked for; an earlier verdict is an old probe's."""
    return str(info.get("startedAt") or requested_at)


async def probe_verdict(session: LspSession, job_id: str, since: str) -> dict[str, Any] | None:
    """The job's probe verdict recorded at or after ``since`` (ISO UTC), waiting for it a while."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PROBE_VERDICT_WAIT_S
    while True:
        status = await session.request("arena/status", {})
        for job in status.get("jobs") or []:
            probe = job.get("probe") if isinstance(job, dict) and job.get("id") == job_id else None
            if isinstance(probe, dict) and str(probe.get("at") or "") >= since:
                return probe
        if loop.time() >= deadline:
            return None
        await asyncio.sleep(0.2)  # a poll of the server, not a wait for luck: the deadline ends it


def announce_start(options: Options, info: dict[str, Any], *, fresh: bool = False) -> None:
    cluster = info.get("cluster")
    if isinstance(cluster, dict):  # the trainer runs on the cluster: its submission, and our agent
        where = f"submission {cluster.get('submissionId')}, agent pid {info.get('agentPid')}"
    else:
        where = f"pid {info.get('pid')}, agent pid {info.get('agentPid')}"
    write_plain(options.console, f"started run {info.get('runId')} of job {run_place(info)} ({where})")
    write_plain(options.console, resume_text(info, fresh=fresh))


def resume_text(info: dict[str, Any], *, fresh: bool = False) -> str:
    """Whether the run resumes, and from which step (``resumedFromStep`` of its RunInfo)."""
    step = info.get("resumedFromStep")
    if isinstance(step, int):
        return (
            f"resuming from the checkpoint at step {step} "
            f"(`arena start {info.get('jobId')} --fresh` starts over)"
        )
    return "starting from step 0 (--fresh)" if fresh else "starting from step 0"


async def follow_and_report(
    session: LspSession,
    options: Options,
    info: dict[str, Any],
    on_interrupt: OnInterrupt = OnInterrupt.DETACH,
    *,
    raw: bool = False,
) -> FollowResult:
    title = run_place(info, await job_name(session, str(info.get("jobId"))))
    view = make_follow_view(options.console, title)
    result = await follow_run(session, view, info, title, on_interrupt, raw=raw)
    if not result.detached:
        report_end(options, result.info)
    return result


def report_end(options: Options, info: dict[str, Any]) -> None:
    """The run's end: a summary on stdout, or one ``arena:`` line on stderr when it failed."""
    lost = lost_line(info)
    if info.get("status") in OK_STATUSES:
        write_plain(options.console, run_summary(info))
        if lost:
            write_plain(options.console, lost)
    else:
        print(f"arena: {visible(run_summary(info))}", file=sys.stderr, flush=True)
        if lost:
            print(f"arena: {visible(lost)}", file=sys.stderr, flush=True)


async def job_name(session: LspSession, job_id: str) -> str:
    status = await session.request("arena/status", {})
    for job in status.get("jobs") or []:
        if isinstance(job, dict) and job.get("id") == job_id:
            return str(job.get("name") or job_id)
    return job_id


# -- stop ----------------------------------------------------------------------------------


def stop_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {"kill": bool(args.kill), "confirm": bool(args.confirm)}
    if args.job:
        params["id"] = args.job
    if args.grace is not None:
        params["graceSeconds"] = args.grace
    return params


async def cmd_stop(options: Options, args: argparse.Namespace) -> int:
    async with connect(options) as session:
        result = await request_asking(session, options, "arena/stop", stop_params(args), stop_question)
        if result.get("status") == "idle" and args.job:
            status = await session.request("arena/status", {})
            require_known_job(status, args.job, [r for r in status.get("runs") or [] if isinstance(r, dict)])
    if result.get("status") == "idle":
        what = f"job {args.job} is not running" if args.job else "nothing is running"
        write_plain(options.console, what)
        return EXIT_OK
    write_plain(options.console, run_summary(result))
    lost = lost_line(result)
    if lost:
        write_plain(options.console, lost)
    tail = [line for line in result.get("tail") or [] if shown(line, raw=args.raw)]
    if tail:  # the trainer's @arena lines hidden, as --follow and `arena logs` hide them
        write_plain(options.console, "last lines:")
        for line in tail:
            print_line(options.console, line)
    return EXIT_OK if result.get("status") in OK_STATUSES else EXIT_FAILED


# -- status --------------------------------------------------------------------------------


async def judged_status(session: LspSession) -> dict[str, Any]:
    """``arena/status`` once the gates have judged every trainer, or as it is after
    ``STATUS_VERDICT_WAIT_S``: a status never waits for the gates (issue 38), and each ``arena``
    command starts a server of its own, whose first status has seldom any verdict yet."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STATUS_VERDICT_WAIT_S
    while True:
        status: dict[str, Any] = await session.request("arena/status", {})
        jobs = status.get("jobs") or []
        if not any(isinstance(job, dict) and job.get("gatesPending") for job in jobs):
            return status
        if loop.time() >= deadline:
            return status  # each job still being checked says so ("the gates are still checking")
        await asyncio.sleep(0.1)  # a poll of the server, not a wait for luck: the deadline ends it


STATUS_VERDICT_WAIT_S = 20.0
"""How long ``arena status`` waits for the gates' verdicts (an ordinary trainer takes well under a
second; a hostile one up to the gates' budget, 8 s)."""


async def cmd_status(options: Options, args: argparse.Namespace) -> int:
    async with connect(options) as session:
        status = await judged_status(session)
        reason = None if args.json else await active_keep_awake_reason(session, status)
    problem = (
        None
        if known_job_ids(status)
        else manifest_problem(manifest_path(options.root, init_options()), options.root)
    )
    if problem:  # said first: a reader of the tables never sees "no jobs" as if the manifest were empty
        print(f"arena: {problem}", file=sys.stderr, flush=True)
    if args.json:
        write_line(sys.stdout, json.dumps(status, indent=2), lines=True)
    else:
        no_jobs = BROKEN_MANIFEST if problem else NO_JOBS
        print_status(options.console, status, no_jobs=no_jobs, keep_awake_reason=reason)
    return EXIT_FAILED if problem else EXIT_OK


async def active_keep_awake_reason(session: LspSession, status: dict[str, Any]) -> str | None:
    """Why the active run cannot keep the machine awake (``keepAwake`` null): its log's first page says."""
    active = status.get("active")
    if not needs_reason(active) or not isinstance(active, dict):
        return None
    params = {"runId": active.get("runId"), "limit": REASON_LOG_LINES}
    page = await session.request("arena/logs", params)
    return keep_awake_reason(page.get("lines") or []) if isinstance(page, dict) else None


# -- logs ----------------------------------------------------------------------------------


def pick_run(status: dict[str, Any], *, job: str | None = None, run_id: str | None = None) -> dict[str, Any]:
    """The run a command is about: ``run_id``, else the active run (of ``job``), else the latest."""
    runs = [r for r in status.get("runs") or [] if isinstance(r, dict)]
    if job is not None and run_id is None:
        require_known_job(status, job, runs)
    if run_id is not None:
        for run in runs:
            if run.get("runId") == run_id:
                return run
        raise CliError(f"no run {run_id} in this workspace")
    active = status.get("active")
    if isinstance(active, dict) and (job is None or active.get("jobId") == job):
        return active
    mine = [r for r in runs if job is None or r.get("jobId") == job]
    if not mine:
        raise CliError(f"job {job} has no runs yet" if job else "no runs yet in this workspace")
    return mine[-1]


def known_job_ids(status: dict[str, Any]) -> list[str]:
    return [str(j.get("id")) for j in status.get("jobs") or [] if isinstance(j, dict) and j.get("id")]


def require_known_job(status: dict[str, Any], job: str, runs: list[dict[str, Any]] | None = None) -> None:
    """A job the manifest lists (or one that has runs: a job since removed from it),
    else ``no job 'nope' in the manifest`` with the ids it has, exit 1."""
    known = known_job_ids(status)
    if job in known or any(r.get("jobId") == job for r in runs or []):
        return
    listed = ", ".join(known) if known else "none"
    raise CliError(f"no job {job!r} in the manifest; known jobs: {listed}")


async def print_all_lines(session: LspSession, options: Options, run_id: str, *, raw: bool = False) -> int:
    """Page through ``arena/logs`` from the first line; the number of lines printed
    (the trainer's ``@arena`` announcements only with ``raw``)."""
    cursor: str | None = None
    count = 0
    while True:
        page = await session.request("arena/logs", {"runId": run_id, "cursor": cursor, "limit": PAGE_LIMIT})
        lines = page.get("lines") or []
        for line in lines:
            if shown(line, raw=raw):
                print_line(options.console, line)
                count += 1
        cursor = page.get("cursor") or cursor
        if not lines:
            return count


async def cmd_logs(options: Options, args: argparse.Namespace) -> int:
    async with connect(options) as session:
        run = pick_run(await session.request("arena/status", {}), job=args.job, run_id=args.run)
        raw = bool(getattr(args, "raw", False))
        if args.follow:
            result = await follow_and_report(session, options, run, raw=raw)
            return result.exit_code
        await print_all_lines(session, options, str(run["runId"]), raw=raw)
    return EXIT_OK


# -- demo ----------------------------------------------------------------------------------


def finished_all_steps(status: dict[str, Any], job_id: str) -> dict[str, Any] | None:
    """The job's latest run when it succeeded having reached its last step, else None."""
    runs = [r for r in status.get("runs") or [] if isinstance(r, dict) and r.get("jobId") == job_id]
    if not runs:
        return None
    last = runs[-1]
    step, total = last.get("step"), last.get("totalSteps")
    done = isinstance(step, int) and isinstance(total, int) and total > 0 and step >= total
    return last if done and last.get("status") == "succeeded" else None


async def cmd_demo(options: Options, args: argparse.Namespace) -> int:
    async with connect(options) as session:
        params: dict[str, Any] = {"id": DEMO_JOB, "approved": True}
        fresh = bool(args.fresh)
        if not fresh:
            finished = finished_all_steps(await session.request("arena/status", {}), DEMO_JOB)
            if finished is not None:
                fresh = True
                write_plain(
                    options.console,
                    f"{DEMO_JOB} already trained all {finished.get('totalSteps')} steps "
                    f"(run {finished.get('runId')}): training it again from step 0",
                )
        if fresh:
            params["resume"] = False
        info = await start_demo(session, options, params)
        announce_start(options, info, fresh=bool(args.fresh))
        write_plain(options.console, INTERRUPT_HINT)
        result = await follow_and_report(
            session, options, info, OnInterrupt.DETACH_OR_STOP, raw=bool(getattr(args, "raw", False))
        )
        if result.detached:
            return EXIT_INTERRUPTED
        metrics = await read_all_metrics(session.request, str(info["runId"]))
        cwd = await job_cwd(session, DEMO_JOB, options.root)
    print_checkpoints(options, result.info, metrics, cwd)
    return result.exit_code


async def start_demo(session: LspSession, options: Options, params: dict[str, Any]) -> Any:
    """The demo's start; a server that says the demo job is finished (``1012``, a finish the
    status did not show) gets the demo's own answer: train it again from step 0."""
    try:
        return await session.request("arena/start", params)
    except JsonRpcError as error:
        question = start_question(error, params, _dt.datetime.now(tz=_dt.timezone.utc))
        if error.code != ALREADY_FINISHED or question is None or params.get("resume") is False:
            raise
        write_plain(options.console, f"{question.warning}: training it again from step 0")
        return await session.request("arena/start", question.retried(params))


async def job_cwd(session: LspSession, job_id: str, root: Path) -> Path:
    """The folder the job runs in (a dry-run start says), else the workspace root."""
    try:
        plan = await session.request("arena/start", {"id": job_id, "dryRun": True})
    except JsonRpcError:
        return root
    cwd = plan.get("cwd") if isinstance(plan, dict) else None
    return Path(cwd) if isinstance(cwd, str) and cwd else root


def checkpoint_paths(info: dict[str, Any], metrics: dict[str, Any], cwd: Path) -> list[tuple[int, Path]]:
    """Each checkpoint file the run announced, with the last step saved there, in order."""
    latest: dict[Path, int] = {}
    announced = [c for c in metrics.get("checkpoints") or [] if isinstance(c, dict)]
    last = info.get("lastCheckpoint")
    if isinstance(last, dict):
        announced.append(last)
    for checkpoint in announced:
        path = checkpoint.get("path")
        if isinstance(path, str) and path:
            resolved = (cwd / path).resolve()
            latest.pop(resolved, None)
            latest[resolved] = int(checkpoint.get("step") or 0)
    return [(step, path) for path, step in latest.items()]


def print_checkpoints(options: Options, info: dict[str, Any], metrics: dict[str, Any], cwd: Path) -> None:
    found = checkpoint_paths(info, metrics, cwd)
    if not found:
        write_plain(options.console, f"run {info.get('runId')} announced no checkpoint")
        return
    write_plain(options.console, f"checkpoints of run {info.get('runId')} (job folder {cwd}):")
    for step, path in found:
        state = "" if path.exists() else " (missing)"
        write_plain(options.console, f"  step {step}: {path}{state}")
    step, path = found[-1]
    write_plain(options.console, f"latest checkpoint: {path} (step {step})")


# -- plot ----------------------------------------------------------------------------------


async def cmd_plot(options: Options, args: argparse.Namespace) -> int:
    from arena_ls.client.plot import (
        code_subtitle,
        default_plot_path,
        require_matplotlib,
        resume_chain,
        stitch,
        write_curve_png,
    )

    require_matplotlib()
    async with connect(options) as session:
        status = await session.request("arena/status", {})
        job_id = str(pick_run(status, job=args.job).get("jobId"))
        runs = [r for r in status.get("runs") or [] if isinstance(r, dict) and r.get("jobId") == job_id]
        chain = resume_chain(sorted(runs, key=lambda r: str(r.get("startedAt") or "")))
        pairs = [(run, await read_all_metrics(session.request, str(run["runId"]))) for run in chain]
    curve = stitch(pairs)
    count = len(chain)
    title = f"{job_id} · {count} run{'s' if count != 1 else ''} · {chain[-1]['runId']}"
    if curve.empty:
        raise CliError(f"job {job_id} has no loss points to plot yet")
    out = Path(args.out) if args.out else default_plot_path(options.root, job_id)
    write_curve_png(curve, title, out, code_subtitle(chain))
    write_plain(options.console, f"wrote {out.resolve()}")
    write_plain(options.console, plot_summary(job_id, count, curve))
    return EXIT_OK


def plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else many or word + 's'}"


def plot_summary(job_id: str, runs: int, curve: JobCurve) -> str:
    """What the picture holds: its runs, resume and relaunch marks, checkpoints and evals."""
    resumes = len([r for r in curve.resumes if not r.relaunch])
    relaunches = len(curve.resumes) - resumes
    return (
        f"{plural(runs, 'run')} of {job_id} stitched by step ({plural(resumes, 'resume')}, "
        f"{plural(relaunches, 'relaunch', 'relaunches')}, "
        f"{plural(len(curve.checkpoints), 'checkpoint')}, {len(curve.evals)} eval points)"
    )
