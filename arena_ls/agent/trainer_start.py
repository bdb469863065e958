"""Starting a trainer: its argv, its environment, its capture, and the run's first record.

Standard library only, with ``platform``, ``outputlog`` and ``atomicfile``
(standard library themselves): the agent's entry point (``launch``) starts
the trainer with these functions before the agent's heavier imports (attrs,
cattrs, psutil) are loaded, and the agent starts every relaunch with the
same ones. Nothing here imports the agent, so the entry point and the agent
both depend on this module and not on each other.

The first record: as soon as the trainer runs, ``record_launch`` writes the
run's ``state.json`` (``running``, the trainer's pid, generation 1), which
is what a server waits for before it answers ``arena/start``. The agent,
once loaded, continues from that generation with the same facts, so a
reader never sees the run go back to ``starting``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arena_ls import platform
from arena_ls.agent.exec_check import verify_exec
from arena_ls.agent.interpreter import with_stream_flags
from arena_ls.agent.pumps import Pump, start_pumps
from arena_ls.agent.resume_args import RESUME_ARGS_VARIABLE, ResumePathUnknown, fill, resume_env
from arena_ls.run import agent_records
from arena_ls.run.atomicfile import write_json_atomic
from arena_ls.run.claim import AGENT_CLAIM
from arena_ls.run.outputlog import ARENA, OutputWriter
from arena_ls.run.stop_marks import with_marks

RUNNING = "running"
"""``RunStatus.RUNNING``'s value (``states`` is not imported here: it is kept to the agent's side)."""


def trainer_argv(
    argv: Sequence[str], resume_args: Sequence[str], step: int | None, path: str | None = None, skip: int = 0
) -> list[str]:
    """The trainer's argv: the job's args, plus ``resume.args`` with ``{step}`` and ``{path}``
    replaced when resuming (``resume_args.fill``; ``ResumePathUnknown`` when ``{path}`` is named
    and ``path`` is None; ``path`` is the verified checkpoint's, as announced, contract 8.1/8.2),
    and ``{skip}`` by the batches a loss-spike rollback skips (0 on any other resume).

    An interpreter given ``-E``/``-I`` gets ``-u -X utf8`` (``interpreter.with_stream_flags``).

    The one place a resume argv is built: the server's dry run, the first
    launch and every relaunch by the watchdog all come here.
    """
    argv = with_stream_flags(argv)
    if step is None or not resume_args:
        return list(argv)
    return [*argv, *fill(resume_args, step, path, skip)]


UTF8_OUTPUT = {"PYTHONIOENCODING": "utf-8", "PYTHONUTF8": "1"}
"""A Python trainer writes UTF-8 to its pipes (on Windows it would use the ANSI code page,
strictly: ``print("✓")`` would crash it), unless the job's env chooses an encoding itself."""


def trainer_env(job_env: Mapping[str, str], run_id: str, job_id: str, stop_file: Path) -> dict[str, str]:
    """The trainer's environment: ours, UTF-8 output, the job's, and the contract's ``ARENA_*`` variables."""
    env = dict(os.environ)
    env.pop(RESUME_ARGS_VARIABLE, None)  # set by the launch that resumes (resume_env), never inherited
    if not any(name in job_env for name in UTF8_OUTPUT):
        env.update(UTF8_OUTPUT)
    env.update(job_env)
    env.update(
        {
            "ARENA_RUN_ID": run_id,
            "ARENA_JOB_ID": job_id,
            "ARENA_STOP_FILE": str(stop_file),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def start_trainer(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the trainer with both outputs on pipes of ``platform.TRAINER_PIPE_BYTES``."""
    process = platform.spawn_trainer(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            platform.enlarge_pipe(pipe.fileno())
    return process


def start_captured(
    argv: list[str], cwd: Path, env: dict[str, str], writer: OutputWriter
) -> tuple[subprocess.Popen[bytes], list[Pump]]:
    """Start the trainer and the pumps that copy its stdout and stderr into the run's output."""
    process = start_trainer(argv, cwd, env)
    return process, capture(process, writer)


def capture(process: subprocess.Popen[bytes], writer: OutputWriter) -> list[Pump]:
    """Start the pumps that copy a started trainer's stdout and stderr into the run's output."""
    assert process.stdout is not None and process.stderr is not None
    pipe_bytes = platform.pipe_size(process.stdout.fileno())
    return start_pumps(process.stdout, process.stderr, writer, pipe_bytes)


class EarlyLaunch:
    """A trainer started before the agent was loaded, with its capture; or why it could not start.

    The capture (``start_capture``) starts once the launcher has recorded the run
    (``record_launch``): a trainer that floods its output from its first instant fills the pipe
    meanwhile, not the state folder's disk, so its printing cannot leave the run unrecorded."""

    __slots__ = ("_handover", "argv", "error", "generation", "job_id", "process", "pumps", "record",
                 "resumed_from_step", "run_id", "started_at", "stop_file", "stop_method", "stop_stage",
                 "taken_over", "writer")  # fmt: skip

    def __init__(
        self,
        argv: list[str],
        writer: OutputWriter,
        process: subprocess.Popen[bytes] | None,
        error: OSError | None,
        *,
        run_id: str = "",
        job_id: str = "",
        resumed_from_step: int | None = None,
        stop_method: str = "file",
        stop_file: str = "",
    ) -> None:
        self.argv = argv
        self.writer = writer
        self.process = process
        self.pumps: list[Pump] = []
        """The capture's pumps, once ``start_capture`` started them."""
        self.error = error
        self.started_at = time.time()
        self.run_id = run_id
        self.job_id = job_id
        self.resumed_from_step = resumed_from_step
        self.stop_file = stop_file
        """The stop file's path as the trainer was told it (``ARENA_STOP_FILE``; "": not told)."""
        self.generation = 0
        """The generation of the last ``state.json`` the launcher wrote (0: none was)."""
        self.record: dict[str, Any] = {}
        """That ``state.json``'s content."""
        self.stop_method = stop_method
        self.stop_stage: str | None = None
        """The stop protocol's first step, taken before the agent took over (``watch_stop``)."""
        self.taken_over = False
        self._handover = threading.Lock()

    def start_capture(self) -> None:
        """Start copying the trainer's output into the run's log (once; nothing for no trainer)."""
        if self.process is not None and not self.pumps:
            self.pumps = capture(self.process, self.writer)

    def hand_over(self) -> str | None:
        """The agent takes the trainer over: ``watch_stop`` acts no more; the stop step it took, if any."""
        with self._handover:
            self.taken_over = True
            return self.stop_stage


def claim_run(run_dir: Path) -> str | None:
    """Take the run for this agent before anything of it starts; None when taken, else why not.

    Every agent, cold or spare, claims its run first (``O_EXCL``: one winner,
    its pid inside), and one that cannot starts nothing. So the claim's
    absence after an agent has died proves it started no trainer: that is
    what lets a server start the run again cold when a spare agent died
    after it was handed the run (``LocalBackend.start_again``), and never
    start a trainer twice.
    """
    try:
        fd = os.open(run_dir / AGENT_CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return f"another job agent has already taken the run ({AGENT_CLAIM} exists)"
    except OSError as error:
        return f"could not claim the run ({AGENT_CLAIM}): {error}"
    try:
        os.write(fd, str(os.getpid()).encode())
    except OSError:
        pass  # the file's existence is the claim; the pid is for a reader
    finally:
        os.close(fd)
    return None


def _spec_checkpoint_path(record: object, step: int | None) -> str | None:
    """The path of the spec's ``jobCheckpoint`` when it is the checkpoint at ``step`` (read plainly)."""
    if not isinstance(record, dict) or step is None or record.get("step") != step:
        return None
    path = record.get("path")
    return path if isinstance(path, str) and path else None


def recorded_argv(
    argv: Sequence[str], resume_args: Sequence[str], step: int | None, path: str | None
) -> list[str]:
    """``trainer_argv`` for a record made before the launch; with ``{path}`` unknown, the job's
    args alone (the launch itself then refuses to start, ``ResumePathUnknown``)."""
    try:
        return trainer_argv(argv, resume_args, step, path)
    except ResumePathUnknown:
        return trainer_argv(argv, resume_args, None)


def launch_from_spec(run_dir: Path) -> EarlyLaunch | None:
    """Start the trainer that ``spec.json`` describes; None when the spec cannot be read plainly,
    and None for a start that resumes: its checkpoint is verified first (contract 8.2), which is
    the agent's (``attempts.AttemptLoop``), and only then does a trainer start."""
    try:
        spec: Any = json.loads((run_dir / "spec.json").read_text(encoding="utf-8"))
        step = spec.get("resumedFromStep")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            return None
        if step is not None and spec.get("resumeArgs"):
            return None
        argv = trainer_argv(
            [str(a) for a in spec["argv"]],
            [str(a) for a in spec.get("resumeArgs") or []],
            step,
            _spec_checkpoint_path(spec.get("jobCheckpoint"), step),
        )
        run_id, job_id = str(spec["runId"]), str(spec["jobId"])
        stop_file = run_dir / "STOP"
        job_env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
        env = trainer_env(job_env, run_id, job_id, stop_file)
        env.update(resume_env(argv, [str(a) for a in spec["argv"]]))
        cwd = Path(spec["cwd"])
        stop_method = str(spec.get("stopMethod") or "file")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    writer = OutputWriter(run_dir, background_commits=True)
    writer.append_line(ARENA, agent_records.starting(job_id, argv).encode())
    ids: dict[str, Any] = {
        "run_id": run_id, "job_id": job_id, "resumed_from_step": step, "stop_method": stop_method,
        "stop_file": str(stop_file),
    }  # fmt: skip
    try:
        verify_exec(spec.get("execCheck"))  # right before the exec: the gated paths again
        return EarlyLaunch(argv, writer, start_trainer(argv, cwd, env), None, **ids)
    except OSError as error:
        return EarlyLaunch(argv, writer, None, error, **ids)


def launch_record(early: EarlyLaunch, last_checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """The run's first ``state.json``: what the agent records once it has taken the trainer over.

    Written in ``RunState``'s wire form (camelCase); the fields it leaves out
    are read as their defaults. psutil is loaded here (for the creation
    times that name the two processes for good), after the trainer started.
    """
    assert early.process is not None
    pid = early.process.pid
    agent_pid = os.getpid()
    return {
        "runId": early.run_id,
        "jobId": early.job_id,
        "status": RUNNING,
        "pid": pid,
        "pidCreateTime": platform.process_identity(pid),
        "agentPid": agent_pid,
        "agentCreateTime": platform.process_identity(agent_pid),
        "startedAt": early.started_at,
        "argv": early.argv,
        "lastCheckpoint": last_checkpoint,
        "updatedAt": time.time(),
        "generation": 1,
    }


def resumed_checkpoint(state_root: Path, job_id: str, step: int | None) -> dict[str, Any] | None:
    """The job's recorded checkpoint (``jobs/<jobId>.json``) when the run resumes from its step.

    Read plainly; anything unexpected gives None, and the agent, which reads
    the record again with its own checks, records it when it takes over.
    """
    if step is None:
        return None
    try:
        record = json.loads((state_root / "jobs" / f"{job_id}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("step") != step:
        return None
    path, at = record.get("path"), record.get("at")
    if not isinstance(path, str) or not isinstance(at, (int, float)) or isinstance(at, bool):
        return None
    return {"step": step, "path": path, "at": at}


def record_launch(run_dir: Path, early: EarlyLaunch) -> None:
    """Record the started trainer in ``state.json`` (generation 1); ``early.generation`` says whether it was.

    Nothing is recorded for a trainer that did not start (the agent records
    that failure), nor when the write fails: then the agent makes the run's
    first record itself, as it would without an early launch (and a state
    folder that refuses every write is the server's 1009).
    """
    if early.process is None or run_dir.joinpath("state.json").exists():
        return
    checkpoint = resumed_checkpoint(run_dir.parent.parent, early.job_id, early.resumed_from_step)
    record = launch_record(early, checkpoint)
    try:
        write_json_atomic(run_dir / "state.json", record)
    except (OSError, ValueError):
        return
    early.generation = int(record["generation"])
    early.record = record


STOPPING = "stopping"


def record_stopping(run_dir: Path, early: EarlyLaunch) -> None:
    """Record ``stopping`` over the launcher's record (the next generation), so every reader sees it.

    The agent continues from that generation; a failed write changes nothing
    (the agent records ``stopping`` itself when it takes over).
    """
    if not early.generation:
        return
    generation = early.generation + 1
    record = {**early.record, "status": STOPPING, "updatedAt": time.time(), "generation": generation}
    try:
        write_json_atomic(run_dir / "state.json", record)
    except (OSError, ValueError):
        return
    early.generation, early.record = generation, record


STOP_WATCH_SECONDS = 0.02
"""How often the launcher looks for a stop request until the agent has taken over."""


def read_stop_request(run_dir: Path) -> dict[str, Any] | None:
    """``stop.json`` read plainly: its request, ``{}`` for an empty file (written on a full disk), or None."""
    path = run_dir / "stop.json"
    try:
        if path.stat().st_size == 0:
            return with_marks(run_dir, {})
        request = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return with_marks(run_dir, request if isinstance(request, dict) else {})


def first_stop_step(run_dir: Path, early: EarlyLaunch, request: dict[str, Any]) -> str | None:
    """Take the stop protocol's first step, as the agent would: kill, the stop file, or the signal.

    The agent, once loaded, goes on from that step (the grace window, the
    kill at its end); None when the trainer has exited already.
    """
    process = early.process
    if process is None or process.poll() is not None:
        return None
    if request.get("kill"):
        platform.kill_tree(process.pid, timeout=5.0, own_child=True)
        return "kill"
    if early.stop_method != "signal" or platform.cooperative_signal_name() is None:
        try:
            (run_dir / "STOP").write_text("stop requested\n")
            return "file"
        except OSError:  # a full disk: the signal is the request (the agent says why)
            pass
    return "signal" if platform.send_cooperative_signal(process.pid) else None


def watch_stop(run_dir: Path, early: EarlyLaunch) -> threading.Thread:
    """Until the agent takes the trainer over, act on a stop request at once.

    The trainer runs, and ``arena/start`` has answered, while the agent is
    still loading; a stop asked for meanwhile must not wait for it.
    """

    def watch() -> None:
        while True:
            time.sleep(STOP_WATCH_SECONDS)
            request = read_stop_request(run_dir)
            with early._handover:
                if early.taken_over:
                    return
                if request is not None:
                    early.stop_stage = first_stop_step(run_dir, early, request)
                    if early.stop_stage is not None:
                        record_stopping(run_dir, early)
                    return

    thread = threading.Thread(target=watch, name="stop-watch", daemon=True)
    thread.start()
    return thread


def adopt_early(early: EarlyLaunch, expected: list[str]) -> subprocess.Popen[bytes]:
    """The trainer ``launch`` started, taken over by the agent (its argv is the spec's, as the
    first attempt's is: ``expected``)."""
    if early.argv != expected:
        logging.getLogger(__name__).warning("the early launch ran %s, not what the spec says", early.argv)
    if early.error is not None:
        raise early.error
    assert early.process is not None
    return early.process
