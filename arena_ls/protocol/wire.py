"""The contract's wire shapes of a run: ``RunInfo``, the start, stop and logs answers.

The lifecycle answers with its own objects (a ``RunView``, a ``DryRun``, a
``LogPage``); this module alone says how they look on the wire, so a new
field of ``RunInfo`` is added in one place.
"""

from __future__ import annotations

from typing import Any

from arena_ls.lifecycle.lostwork import lost_work
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.starter import DryRun
from arena_ls.lifecycle.supervisor import LogPage
from arena_ls.run.capture import LogLine
from arena_ls.run.rundir import CheckpointRecord, RelaunchRecord, RunSpec, RunState
from arena_ls.run.states import RunStatus
from arena_ls.timeutil import iso_utc, iso_utc_now
from arena_ls.validation import finite

STOP_TAIL_LINES = 20
"""Lines of output an ``arena/stop`` answer carries as ``tail``."""


def run_info(view: RunView, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contract's ``RunInfo``: every field present, null included.

    ``insights`` is empty unless ``extra`` carries the workspace's (a refusal's
    ``active`` run, formatted far from the insights service, has none).
    """
    state = view.state or RunState(run_id=view.run_id, job_id=view.spec.job_id)
    progress = view.progress
    checkpoint = state.last_checkpoint
    step = _latest_step(_announced_step(view, progress.step, state.step), checkpoint)
    live = view.status in (RunStatus.RUNNING, RunStatus.STOPPING)
    info: dict[str, Any] = {
        "runId": view.run_id,
        "jobId": view.spec.job_id,
        "status": view.status.value,
        "pid": state.pid,
        "agentPid": state.agent_pid if state.agent_pid else (view.agent.pid if view.agent else None),
        "startedAt": iso_utc(state.started_at),
        "endedAt": iso_utc(state.ended_at) if view.is_final else None,
        "exitCode": state.exit_code,
        "signal": state.signal,
        "stoppedBy": state.stopped_by,
        "failure": _failure(view, state),
        "restarts": state.restarts,
        "step": step,
        "totalSteps": progress.total if progress.total is not None else state.total_steps,
        "loss": finite(progress.loss if progress.loss is not None else state.loss),
        "stepsPerSecond": _round(progress.steps_per_second) if live else None,
        "etaSeconds": _round(progress.eta_seconds) if live else None,
        "stalled": bool(state.stalled),
        "lastCheckpoint": {"step": checkpoint.step, "path": checkpoint.path, "at": iso_utc(checkpoint.at)}
        if checkpoint
        else None,
        "logPath": str(view.run_dir.log_path),
        "jobName": view.spec.job_name,
        "resumedFromStep": view.spec.resumed_from_step,
        "argv": state.argv or view.spec.argv,
        "gpuMemoryMb": None,
        "gpuUtilization": None,
        "cluster": _cluster_wire(view.spec, state),
        "insights": [],
        "lost": _lost(view, state, step),
        "waitingFor": state.waiting_for if view.status is RunStatus.RESTARTING else None,
        "keepAwake": state.keep_awake,
        "afterReboot": None,
        "record": view.spec.record,
        "relaunches": [relaunch_to_wire(relaunch) for relaunch in state.relaunches],
        "resumedFrom": _resumed_from(state),
    }
    if extra:
        info.update(extra)
    return info


FINAL_ONLY_FIELDS = ("endedAt", "exitCode", "signal", "stoppedBy", "failure")


def passing_info(info: dict[str, Any], status: RunStatus, restarts: int) -> dict[str, Any]:
    """``info`` as it was while the run passed through ``status`` (a status no reading caught).

    ``restarts`` is the count at that point; the fields that only an ended run has are left null.
    """
    return {**info, "status": status.value, "restarts": restarts, **dict.fromkeys(FINAL_ONLY_FIELDS)}


def tail(view: RunView, count: int = STOP_TAIL_LINES) -> list[dict[str, Any]]:
    """The last ``count`` lines the server holds of a run, as ``LogLine`` objects."""
    return [line_wire(line) for line in list(view.ring)[-count:]]


def line_wire(line: LogLine) -> dict[str, Any]:
    return dict(line.to_wire())


def dry_run(result: DryRun) -> dict[str, Any]:
    """``arena/start`` with ``dryRun``: what would run, and what the gates and pre-flight say."""
    return {
        "argv": result.argv,
        "cwd": result.cwd,
        "gates": [d.to_wire() for d in result.gate_errors],
        "preflight": result.checks,
    }


def nothing_stopped() -> dict[str, Any]:
    """``arena/stop``'s answer when no run was active (a stopped run answers its ``RunInfo``)."""
    return {"status": "idle"}


def logs_page(page: LogPage) -> dict[str, Any]:
    """``arena/logs``'s answer; a reset (the log was replaced) is one ``arena`` line first."""
    lines = [line_wire(line) for line in page.lines]
    if page.reset:
        lines.insert(0, {"seq": -1, "stream": "arena", "text": page.reset, "at": iso_utc_now()})
    return {"runId": page.run_id, "lines": lines, "cursor": page.cursor, "done": page.done}


def error_data(data: dict[str, Any]) -> dict[str, Any]:
    """A refusal's data with any run it names (1003's ``active``, 1012's ``run``) as its ``RunInfo``,
    and a checkpoint (1011's ``lastCheckpoint``) as ``JobInfo.lastCheckpoint`` writes it."""
    return {key: _error_value(value) for key, value in data.items()}


def _error_value(value: Any) -> Any:
    if isinstance(value, RunView):
        return run_info(value)
    if isinstance(value, CheckpointRecord):
        return job_checkpoint(value)
    return value


def job_checkpoint(record: CheckpointRecord | None) -> dict[str, Any] | None:
    """``JobInfo.lastCheckpoint`` (contract 7.1): ``{step, path, at, runId}`` or null."""
    if record is None:
        return None
    return {"step": record.step, "path": record.path, "at": iso_utc(record.at), "runId": record.run_id}


def _resumed_from(state: RunState) -> dict[str, Any] | None:
    """``RunInfo.resumedFrom`` (contract 8.2): the verified checkpoint the run resumed from, or null."""
    resumed = state.resumed_from
    if resumed is None:
        return None
    skipped = [{"step": s.step, "path": s.path, "why": s.why} for s in resumed.skipped]
    return {"step": resumed.step, "path": resumed.path, "verified": resumed.verified, "skipped": skipped}


def _failure(view: RunView, state: RunState) -> dict[str, str] | None:
    if view.damage is not None:
        return {"kind": "damaged", "evidence": view.damage}
    if state.failure is not None:
        return {"kind": state.failure.kind, "evidence": state.failure.evidence}
    if view.disk_full is not None and not view.is_final:
        return {"kind": "disk-full", "evidence": view.disk_full}
    return None


def _announced_step(view: RunView, read: int | None, recorded: int | None) -> int | None:
    """The step the trainer announced last. While the run lives, the one the server read from the
    log (the agent records it every few seconds). Once it ended, the agent's record: the agent
    read the trainer's last lines before it wrote the end, the server's reading of the log may not
    have caught up yet, and ``lost`` counts from the record (issue 38's CI: "killed at step 171;
    last checkpoint 6: 166 steps lost", the log read to 171, the record at 172)."""
    if view.is_final and recorded is not None:
        return recorded
    return read if read is not None else recorded


def _latest_step(step: int | None, checkpoint: CheckpointRecord | None) -> int | None:
    """The step reached: progress is announced every few steps, a checkpoint names the step it
    saved, so the checkpoint's step counts when it is the later one."""
    if checkpoint is None:
        return step
    return checkpoint.step if step is None else max(step, checkpoint.step)


def _lost(view: RunView, state: RunState, step: int | None) -> dict[str, Any] | None:
    """``RunInfo.lost`` (contract 7.1): the work after the last checkpoint a stop or kill lost,
    counted to ``step``, the step the same ``RunInfo`` says was reached."""
    if view.state is None or view.damage is not None:
        return None
    lost = lost_work(state, view.spec.resumed_from_step, step)
    return None if lost is None else {"steps": lost.steps, "seconds": lost.seconds}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _cluster_wire(spec: RunSpec, state: RunState) -> dict[str, Any] | None:
    """``RunInfo.cluster`` (contract 6.2): null on this machine."""
    if spec.cluster is None:
        return None
    record = state.cluster
    return {
        "name": spec.cluster.name,
        "kind": spec.cluster.kind,
        "address": spec.cluster.address,
        "submissionId": record.submission_id if record is not None else None,
    }


def relaunch_to_wire(relaunch: RelaunchRecord) -> dict[str, Any]:
    """``RunInfo.relaunches[]`` (an arena-ls decision, docs/protocol.md): what each relaunch cost."""
    return {
        "at": iso_utc(relaunch.at),
        "crashedAt": iso_utc(relaunch.crashed_at) if relaunch.crashed_at is not None else None,
        "fromStep": relaunch.from_step,
        "stepsLost": relaunch.steps_lost,
        "downtimeSeconds": relaunch.downtime_seconds,
    }
