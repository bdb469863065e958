"""The cluster agent when the cluster misbehaves: a fake ``JobsClient`` plays Ray, the agent is real.

No Ray head and no network: ``ClusterAgent`` follows a run folder on disk
while the fake answers (or fails to answer) each request the way a head
that lost its job table, changed its token, dropped a connection after
accepting a submission, or refused one would. Each test runs the agent
to its end in a thread and judges the run by its files.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from arena_ls.cluster import agent as agent_module
from arena_ls.cluster import ray_trainer
from arena_ls.cluster.agent import ClusterAgent
from arena_ls.cluster.backend import RayBackend
from arena_ls.cluster.jobsapi import ClusterError
from arena_ls.run.rundir import CheckpointRecord, ClusterRecord, ClusterSpec, RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.helpers.fake_backend import write_state
from tests.helpers.serving import serve_in_thread

WAIT = 30.0
"""Bounds an agent that never ends (the defect); a working one ends in well under a second."""
CLUSTER = "lab"

Answer = Callable[[str], dict[str, Any]]


def unreachable() -> ClusterError:
    return ClusterError("unreachable", f"cluster {CLUSTER!r} is not reachable (timed out)")


def answered(code: int) -> ClusterError:
    if code in (401, 403):
        return ClusterError("unauthenticated", f"cluster {CLUSTER!r} refused the request ({code})", code)
    kind = "not-found" if code == 404 else "refused"
    return ClusterError(kind, f"cluster {CLUSTER!r} answered {code} to /api/jobs/x: nope", code)


class FakeJobs:
    """Ray's Jobs API as the agent uses it; ``infos`` are the answers to ``info``, in turn
    (an exception is raised; the last answer repeats)."""

    def __init__(
        self, infos: list[dict[str, Any] | Exception], submit_error: Exception | None = None
    ) -> None:
        self.infos = infos
        self.submit_error = submit_error
        self.submitted: list[str] = []
        self.stopped: list[str] = []
        self.info_calls = 0

    def package_exists(self, uri: str) -> bool:
        return True

    def upload_package(self, uri: str, data: bytes) -> None:
        raise AssertionError("the package exists")

    def submit(self, payload: dict[str, Any]) -> str:
        sid = str(payload["submission_id"])
        self.submitted.append(sid)
        if self.submit_error is not None:
            error, self.submit_error = self.submit_error, None
            raise error
        return sid

    def info(self, submission_id: str) -> dict[str, Any]:
        answer = self.infos[min(self.info_calls, len(self.infos) - 1)]
        self.info_calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    def logs(self, submission_id: str) -> str:
        return ""

    def stop(self, submission_id: str) -> bool:
        self.stopped.append(submission_id)
        return True


RUNNING = {"status": "RUNNING"}
SUCCEEDED = {"status": "SUCCEEDED", "driver_exit_code": 0}


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls and retries in milliseconds; the cluster may refuse for 0.2 s before the run is given up."""
    monkeypatch.setattr(ray_trainer, "POLL_SECONDS", 0.005)
    monkeypatch.setattr(ray_trainer, "UNREACHABLE_RETRY_SECONDS", 0.005)
    monkeypatch.setattr(ray_trainer, "REFUSED_GIVE_UP_SECONDS", 0.2)


@pytest.fixture
def folder(tmp_path: Path) -> StateFolder:
    state = StateFolder(tmp_path / ".aide" / "training")
    state.ensure()  # as a server makes it before any run
    return state


def make_run(folder: StateFolder, tmp_path: Path, **spec_fields: Any) -> RunDir:
    (tmp_path / "train.py").write_text("print('hi')\n")

    def build(run_id: str) -> RunSpec:
        return RunSpec(
            run_id=run_id, job_id="job", job_name="Job", kind="train", argv=["python", "train.py"],
            cwd=str(tmp_path), stop_method="signal", backend="ray",
            cluster=ClusterSpec(name=CLUSTER, kind="ray", address="http://127.0.0.1:9"), **spec_fields,
        )  # fmt: skip

    return RunLock(folder).claim("job", build)


@pytest.fixture
def run(folder: StateFolder, tmp_path: Path) -> RunDir:
    return make_run(folder, tmp_path)


def cluster_agent(run: RunDir, jobs: FakeJobs, *, adopt: bool = False) -> ClusterAgent:
    agent = ClusterAgent(run, adopt)
    agent._connect = lambda: jobs  # type: ignore[assignment,method-assign,return-value]
    return agent


def follow_to_the_end(target: Callable[[], Any]) -> None:
    """Run the agent in a thread; fail (never hang) when it does not end."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as error:  # handed to the test
            errors.append(error)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), "the agent never gave the run up"
    if errors:
        raise errors[0]


def lock_holder(folder: StateFolder) -> str | None:
    return RunLock(folder).holder()


# -- 1. a cluster that answers, but not about the job ------------------------------------------------


@pytest.mark.parametrize("code", [404, 401, 403, 400])
def test_a_cluster_that_keeps_refusing_to_tell_of_the_job_makes_the_run_lost(
    run: RunDir, folder: StateFolder, code: int
) -> None:
    jobs = FakeJobs([RUNNING, answered(code)])
    follow_to_the_end(cluster_agent(run, jobs).run)
    state = run.read_state()
    assert state.status is RunStatus.LOST
    assert state.failure is not None and state.failure.kind == "error"
    assert f"{code}" in state.failure.evidence and "no longer followed" in state.failure.evidence
    assert lock_holder(folder) is None, "the lock goes with the run"


def test_an_unreachable_head_is_waited_out_however_long(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_trainer, "REFUSED_GIVE_UP_SECONDS", 0.0)  # any 4xx would end it at once
    silence: list[dict[str, Any] | Exception] = [unreachable(), ClusterError("refused", "busy", 503)] * 10
    jobs = FakeJobs([RUNNING, *silence, SUCCEEDED])
    follow_to_the_end(cluster_agent(run, jobs).run)
    assert run.read_state().status is RunStatus.SUCCEEDED, "no answer is not an answer: the job ran on"


def test_a_refusal_that_passes_is_forgotten(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_trainer, "REFUSED_GIVE_UP_SECONDS", 3600.0)
    jobs = FakeJobs([RUNNING, answered(404), answered(404), RUNNING, SUCCEEDED])
    follow_to_the_end(cluster_agent(run, jobs).run)
    assert run.read_state().status is RunStatus.SUCCEEDED


# -- 2. a submission with no clear answer --------------------------------------------------------------


def test_a_submission_whose_answer_was_lost_is_followed_not_failed(run: RunDir) -> None:
    jobs = FakeJobs([RUNNING, SUCCEEDED], submit_error=unreachable())  # Ray has it; the answer never came
    follow_to_the_end(cluster_agent(run, jobs).run)
    state = run.read_state()
    assert state.status is RunStatus.SUCCEEDED, state.failure
    assert state.cluster is not None
    assert len(jobs.submitted) == 1, "never sent twice: Ray knows it"
    assert state.cluster.accepted == jobs.submitted[0]


def test_a_submission_that_never_arrived_is_sent_again_under_its_id(run: RunDir) -> None:
    jobs = FakeJobs(
        [answered(404), RUNNING, SUCCEEDED], submit_error=ClusterError("refused", "bad gateway", 502)
    )
    follow_to_the_end(cluster_agent(run, jobs).run)
    assert run.read_state().status is RunStatus.SUCCEEDED
    assert len(jobs.submitted) == 2 and len(set(jobs.submitted)) == 1, "the recorded id, once more"


def test_a_refused_submission_fails_the_run(run: RunDir, folder: StateFolder) -> None:
    jobs = FakeJobs([answered(404)], submit_error=answered(400))
    follow_to_the_end(cluster_agent(run, jobs).run)
    state = run.read_state()
    assert state.status is RunStatus.CRASHED
    assert state.failure is not None and "did not accept" in state.failure.evidence
    assert jobs.info_calls == 0
    assert lock_holder(folder) is None


def test_nothing_is_submitted_whose_id_is_not_on_disk(run: RunDir) -> None:
    jobs = FakeJobs([RUNNING, SUCCEEDED])
    agent = cluster_agent(run, jobs)
    real_flush = agent.writer.flush
    # The submission's id never reaches the disk; the final state does (it is retried until it does).
    agent.writer.flush = lambda timeout: agent.state.status.is_final and real_flush(timeout)  # type: ignore[method-assign]
    follow_to_the_end(agent.run)
    assert jobs.submitted == []
    assert agent.state.status is RunStatus.CRASHED
    assert agent.state.failure is not None and "could not be recorded" in agent.state.failure.evidence


# -- 3. an agent that fails gives the job up, not only the run ---------------------------------------


def test_a_follower_that_fails_asks_the_cluster_to_stop_its_job(
    run: RunDir, folder: StateFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = FakeJobs([RUNNING, RuntimeError("a bug in the agent")])
    monkeypatch.setattr(ClusterAgent, "_connect", lambda self: jobs)
    codes: list[int] = []
    follow_to_the_end(lambda: codes.append(agent_module.main([str(run.path)])))
    assert codes == [1]
    state = run.read_state()
    assert state.status is RunStatus.LOST
    assert state.cluster is not None and jobs.stopped == [state.cluster.submission_id]
    assert state.failure is not None and "asked cluster 'lab' to stop" in state.failure.evidence
    assert lock_holder(folder) is None


def test_a_follower_that_cannot_read_its_run_submits_nothing(tmp_path: Path) -> None:
    broken = RunDir(tmp_path / "runs" / "job-1")
    broken.path.mkdir(parents=True)
    (broken.path / "spec.json").write_text("{not json")
    assert agent_module.main([str(broken.path)]) == 1  # an error, not a traceback out of main


class UnreachableOnStop(FakeJobs):
    def stop(self, submission_id: str) -> bool:
        raise unreachable()


def test_a_stop_an_earlier_agent_began_ends_stopped(run: RunDir) -> None:
    """Adopted while ``stopping`` (its stop not heard again): Ray's end of the job is the stop's end,
    never an illegal move back to ``running``."""
    sid = "arena-job-1"
    record = ClusterRecord(
        name=CLUSTER,
        kind="ray",
        address="http://127.0.0.1:9",
        submission_id=sid,
        submissions=[sid],
        accepted=sid,
    )
    write_state(run, status=RunStatus.STOPPING, cluster=record, agent_pid=2**22 + 17, agent_create_time=1.0)
    run.request_stop(kill=False, grace_seconds=None, by="a test")
    jobs = UnreachableOnStop([{"status": "FAILED", "driver_exit_code": 143, "message": "terminated"}])
    follow_to_the_end(cluster_agent(run, jobs, adopt=True).run)
    state = run.read_state()
    assert state.status is RunStatus.STOPPED, state.failure


# -- 9. a resume from step 0 -----------------------------------------------------------------------------


def test_a_resume_from_step_0_keeps_its_checkpoint(folder: StateFolder, tmp_path: Path) -> None:
    folder.record_job_checkpoint("job", CheckpointRecord(step=0, path="ckpt-0", at=time.time()))
    run = make_run(folder, tmp_path, resume_args=["--resume", "--start-step", "{step}"], resumed_from_step=0)
    agent = cluster_agent(run, FakeJobs([SUCCEEDED]))
    assert agent.state.last_checkpoint is not None and agent.state.last_checkpoint.step == 0
    assert agent.state.argv[-2:] == ["--start-step", "0"]
    agent.writer.close(5.0)
    agent.output.close()


# -- 3. a run the server gives up as lost: its job is asked to stop ----------------------------------


class _StopHead(http.server.BaseHTTPRequestHandler):
    heard: ClassVar[list[tuple[str, str | None]]] = []
    done: ClassVar[threading.Event] = threading.Event()

    def do_POST(self) -> None:
        type(self).heard.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"stopped": True}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        type(self).done.set()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_a_lost_cluster_run_has_its_job_asked_to_stop(folder: StateFolder, tmp_path: Path) -> None:
    _StopHead.heard.clear()  # the handler's class is shared by every run of this test in one process
    _StopHead.done.clear()
    head = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StopHead)
    serve_in_thread(head)
    try:
        token = tmp_path / "token"
        token.write_text("s3cret\n")
        address = f"http://127.0.0.1:{head.server_address[1]}"

        def build(run_id: str) -> RunSpec:
            cluster = ClusterSpec(name=CLUSTER, kind="ray", address=address, token_file=str(token))
            return RunSpec(
                run_id=run_id, job_id="job", job_name="Job", kind="task", argv=["x"], cwd=str(tmp_path),
                backend="ray", cluster=cluster,
            )  # fmt: skip

        run = RunLock(folder).claim("job", build)
        record = ClusterRecord(name=CLUSTER, kind="ray", address=address, submission_id="arena-job-1")
        state = write_state(run, status=RunStatus.RUNNING, cluster=record)
        said = RayBackend().end_remains(run, state)
        assert said == f"asked cluster {CLUSTER!r} to stop arena-job-1"
        assert _StopHead.done.wait(WAIT)
        assert _StopHead.heard == [("/api/jobs/arena-job-1/stop", "Bearer s3cret")]
        state.cluster = ClusterRecord(name=CLUSTER, kind="ray", address=address)
        assert RayBackend().end_remains(run, state) is None, "nothing was sent: nothing to stop"
    finally:
        head.shutdown()
        head.server_close()
