"""A cluster run's agent tells the person too (contract 8.3), and a new agent never tells again.

The agent is the run's agent on this machine: it tells ``notify.command`` (a
real script) the run's end once, and keeps nothing awake (the machine that
trains is the cluster's: ``keepAwake`` false). An agent that adopts the run
later (a restarted server's) reads what was told from the run's log. A fake
``JobsClient`` plays Ray.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from arena_ls.cluster.agent import ClusterAgent
from arena_ls.run.rundir import NotifySpec
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.cluster.test_cluster_agent_misbehaving import (
    RUNNING,
    SUCCEEDED,
    FakeJobs,
    cluster_agent,
    follow_to_the_end,
    make_run,
    quick,
)

__all__ = ["quick"]  # the fixture, used here too

RECORDER = "import sys\nopen(sys.argv[1], 'a', encoding='utf-8').write(sys.stdin.read())\n"


def test_the_agent_tells_the_end_once_and_a_new_agent_does_not_tell_it_again(tmp_path: Path) -> None:
    folder = StateFolder(tmp_path / ".aide" / "training")
    folder.ensure()
    script, received = tmp_path / "recorder.py", tmp_path / "received.jsonl"
    script.write_text(RECORDER, encoding="utf-8")
    notify = NotifySpec(desktop=False, command=[sys.executable, str(script), str(received)])
    run = make_run(folder, tmp_path, notify=notify)
    agent = cluster_agent(run, FakeJobs([RUNNING, SUCCEEDED]))
    follow_to_the_end(agent.run)
    state = run.read_state()
    assert (state.status, state.keep_awake) == (RunStatus.SUCCEEDED, False)
    [event] = [json.loads(line) for line in received.read_text(encoding="utf-8").splitlines()]
    assert (event["event"], event["runId"], event["outcome"]) == ("ended", run.run_id, "succeeded")
    again = ClusterAgent(run, True)
    assert again.laptop.notifier is not None
    again.laptop.notifier.observe({"status": "succeeded", "jobId": "job"})
    assert again.laptop.notifier.close(30)
    assert len(received.read_text(encoding="utf-8").splitlines()) == 1, "told once, whoever follows"
    again.output.close()
