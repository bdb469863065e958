"""A cluster run's checkpoints are read on the cluster (``cluster/ckpt_reader.py``) and judged here
(``cluster/ckpt_remote.py``) with ``ckptverify.judge`` (contract 8.2).

The reader is run as it is shipped (``python -I -c SOURCE REQUEST``) in a folder of real files;
its output is parsed and judged. Output that is malformed or cut short verifies nothing, and a
reader that fails, is too slow or is stopped never passes a checkpoint. The end-to-end cases on
a real Ray head are in ``tests/cluster/test_cluster_checkpoint_verify.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from arena_ls.cluster import ckpt_reader, ckpt_remote
from arena_ls.cluster.ckpt_remote import ClusterVerifier, Malformed, parse_readings, reader_python
from arena_ls.cluster.jobsapi import ClusterError
from arena_ls.lifecycle.ckptverify import Verification
from arena_ls.lifecycle.rundir import CheckpointRecord

PAYLOAD = b'{"step": 40, "weights": "' + b"w" * 4000 + b'"}'
SHA = hashlib.sha256(PAYLOAD).hexdigest()


def record(step: int, path: str, size: int | None = None, sha256: str | None = None) -> CheckpointRecord:
    return CheckpointRecord(step=step, path=path, at=float(step), bytes=size, sha256=sha256)


def settled(path: Path, data: bytes) -> None:
    """``data`` at ``path``, last changed a minute ago (quiet: read once)."""
    path.write_bytes(data)
    old = time.time() - 60
    os.utime(path, (old, old))


def run_reader(folder: Path, sent: list[CheckpointRecord]) -> str:
    """The reader as ``ckpt_remote`` ships it, run in ``folder`` (the trainer's folder on the cluster)."""
    request = json.dumps(ckpt_remote.request_for(sent, 120.0))
    argv = [sys.executable, "-I", "-c", ckpt_remote.reader_source(), request]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def verified_here(folder: Path, ordered: list[CheckpointRecord]) -> Verification:
    sent = [r for r in ordered if r.path]
    return ckpt_remote.judged(ordered, parse_readings(run_reader(folder, sent), sent))


def test_a_torn_newest_checkpoint_is_skipped_for_the_whole_one_before_it(tmp_path: Path) -> None:
    settled(tmp_path / "ckpt-40.pt", PAYLOAD[: len(PAYLOAD) // 2])
    settled(tmp_path / "ckpt-20.pt", PAYLOAD)
    ordered = [record(40, "ckpt-40.pt", len(PAYLOAD), SHA), record(20, "ckpt-20.pt", len(PAYLOAD), SHA)]
    verification = verified_here(tmp_path, ordered)
    assert verification.chosen is ordered[1] and verification.verified == "sha256"
    assert [(s.step, s.why) for s in verification.skipped] == [
        (40, f"is {len(PAYLOAD) // 2} bytes, {len(PAYLOAD)} announced: torn or replaced")
    ]


def test_a_damaged_checkpoint_of_the_right_size_is_skipped_on_its_sha256(tmp_path: Path) -> None:
    settled(tmp_path / "ckpt-40.pt", b"\0" * len(PAYLOAD))
    settled(tmp_path / "ckpt-20.pt", PAYLOAD)
    ordered = [record(40, "ckpt-40.pt", len(PAYLOAD), SHA), record(20, "ckpt-20.pt", len(PAYLOAD), SHA)]
    verification = verified_here(tmp_path, ordered)
    assert verification.chosen is ordered[1]
    assert "differs from the announced" in verification.skipped[0].why


def test_the_reader_stops_at_the_first_that_passes_and_reads_no_older_file(tmp_path: Path) -> None:
    settled(tmp_path / "ckpt-40.pt", PAYLOAD)
    ordered = [record(40, "ckpt-40.pt", len(PAYLOAD)), record(20, "gone.pt"), record(0, "")]
    sent = [r for r in ordered if r.path]
    output = run_reader(tmp_path, sent)
    assert [line.split()[0] for line in output.splitlines()] == ["@arena-ckpt-reading", "@arena-ckpt-end"]
    verification = ckpt_remote.judged(ordered, parse_readings(output, sent))
    assert (verification.chosen, verification.verified) == (ordered[0], "bytes")


def test_missing_files_relative_to_the_trainers_folder_and_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    settled(tmp_path / "abs.pt", PAYLOAD)
    ordered = [record(40, "ckpt-40.pt"), record(20, str(tmp_path / "abs.pt"), len(PAYLOAD), SHA)]
    verification = verified_here(tmp_path / "run", ordered)
    assert verification.chosen is ordered[1] and verification.verified == "sha256"
    assert verification.skipped[0].why == "does not exist"


def test_a_file_still_being_written_is_not_resumed_from(tmp_path: Path) -> None:
    """Its size changes within the quiet window: read twice, it fails as being written."""
    path = tmp_path / "ckpt-40.pt"
    path.write_bytes(b"x")
    grow = "import sys, time\nwhile True:\n    open(sys.argv[1], 'ab').write(b'x')\n    time.sleep(0.05)"
    writer = subprocess.Popen([sys.executable, "-c", grow, str(path)])
    try:
        verification = verified_here(tmp_path, [record(40, "ckpt-40.pt")])
    finally:
        writer.kill()
        writer.wait()
    assert verification.chosen is None
    assert verification.skipped[0].why.startswith("is being written")


def test_a_folder_checkpoint_is_its_files_total(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-40"
    folder.mkdir()
    settled(folder / "model.bin", b"m" * 100)
    settled(folder / "optimizer.bin", b"o" * 50)
    os.utime(folder, (time.time() - 60, time.time() - 60))
    verification = verified_here(tmp_path, [record(40, "checkpoint-40", 150, SHA)])
    assert verification.verified == "bytes", "no hash is defined for a folder"


def test_a_workspace_module_named_like_a_standard_one_does_not_break_the_reader(tmp_path: Path) -> None:
    """``-I``: the trainer's folder is not on the reader's ``sys.path`` (a ``json.py`` there)."""
    (tmp_path / "json.py").write_text("raise SystemExit('the workspace json.py was imported')\n")
    settled(tmp_path / "ckpt-40.pt", PAYLOAD)
    verification = verified_here(tmp_path, [record(40, "ckpt-40.pt", len(PAYLOAD), SHA)])
    assert verification.verified == "sha256"


def test_no_line_of_the_readers_source_reads_as_its_output() -> None:
    """Ray echoes the entrypoint (the whole source) into the job's log before its output."""
    for text in ckpt_remote.reader_source().splitlines():
        assert not text.startswith((ckpt_reader.READING, ckpt_reader.END)), text


# -- the reader's output: anything but whole, ordered readings verifies nothing ------------------

SENT = [record(40, "ckpt-40.pt", 10), record(20, "ckpt-20.pt", 10)]


def line(index: int, path: str, **fields: Any) -> str:
    reading = {"index": index, "path": path, "exists": True, "size": 10, "mtime_ns": 5, "is_folder": False}
    return ckpt_reader.READING + json.dumps({**reading, **fields})


def end(count: int) -> str:
    return ckpt_reader.END + json.dumps({"readings": count})


def test_whole_output_parses_and_other_lines_are_ignored() -> None:
    output = "\n".join(
        ["Ray says hello", line(0, "ckpt-40.pt", size=5), line(1, "ckpt-20.pt"), end(2), "bye"]
    )
    readings = parse_readings(output, SENT)
    assert (readings[0].size, readings[1].size) == (5, 10)


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("", "cut short"),
        (line(0, "ckpt-40.pt"), "cut short"),
        (line(0, "ckpt-40.pt") + "\n" + ckpt_reader.READING + '{"index": 1, "path": "ckpt-20', "not JSON"),
        (line(0, "ckpt-40.pt") + "\n" + end(2), "counts other readings"),
        (line(0, "ckpt-40.pt") + "\n" + ckpt_reader.END + "{", "not JSON"),
        (line(0, "ckpt-40.pt") + "\n" + ckpt_reader.END + "[1]", "not a JSON object"),
        (line(1, "ckpt-20.pt") + "\n" + end(1), "not the reading of candidate 0"),
        (line(0, "ckpt-20.pt") + "\n" + end(1), "not the reading of candidate 0"),
        ("\n".join([line(0, "ckpt-40.pt"), line(1, "ckpt-20.pt"), line(2, "x"), end(3)]), "candidate 2"),
        (line(0, "ckpt-40.pt", size="10") + "\n" + end(1), "wrong type"),
        (line(0, "ckpt-40.pt", size=True) + "\n" + end(1), "wrong type"),
        (line(0, "ckpt-40.pt", size=-1) + "\n" + end(1), "wrong type"),
        (line(0, "ckpt-40.pt", exists="yes") + "\n" + end(1), "wrong type"),
        (line(0, "ckpt-40.pt", size=None) + "\n" + end(1), "wrong type"),
        (line(0, "ckpt-40.pt", sha256="ABC") + "\n" + end(1), "wrong type"),
        (line(0, "ckpt-40.pt", error=3) + "\n" + end(1), "wrong type"),
        (ckpt_reader.READING + "[0]\n" + end(1), "not a JSON object"),
    ],
)
def test_malformed_or_truncated_output_is_not_trusted(output: str, said: str) -> None:
    with pytest.raises(Malformed, match=said):
        parse_readings(output, SENT)


# -- the reader's job: any trouble verifies nothing -----------------------------------------------


class FakeCluster:
    """Ray's Jobs API for one reader submission: ``statuses`` answered in turn (the last repeats)."""

    def __init__(self, statuses: list[dict[str, Any] | Exception], logs: str = "") -> None:
        self.statuses = statuses
        self.output = logs
        self.payloads: list[dict[str, Any]] = []
        self.stopped: list[str] = []
        self.submit_error: Exception | None = None

    def submit(self, payload: dict[str, Any]) -> str:
        self.payloads.append(payload)
        if self.submit_error is not None:
            raise self.submit_error
        return str(payload["submission_id"])

    def info(self, submission_id: str) -> dict[str, Any]:
        answer = self.statuses[0] if len(self.statuses) == 1 else self.statuses.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def logs(self, submission_id: str) -> str:
        return self.output

    def stop(self, submission_id: str) -> bool:
        self.stopped.append(submission_id)
        return True


def verifier(cluster: FakeCluster, stop: bool = False, **fields: Any) -> ClusterVerifier:
    return ClusterVerifier(
        cluster,  # type: ignore[arg-type]
        "lab", "run1", lambda: "gcs://_ray_pkg_abc.zip", "python3", lambda: stop,
        poll_seconds=0.001, **fields,
    )  # fmt: skip


WHOLE = "\n".join([line(0, "ckpt-40.pt", size=3), line(1, "ckpt-20.pt"), end(2)])


def test_the_readers_submission_runs_in_the_runs_package_with_no_shell() -> None:
    cluster = FakeCluster([{"status": "SUCCEEDED"}], WHOLE)
    verification = verifier(cluster, node_id="node-7").verify(SENT)
    assert verification.chosen is SENT[1] and verification.verified == "bytes"
    assert verification.skipped[0].why == "is 3 bytes, 10 announced: torn or replaced"
    payload = cluster.payloads[0]
    assert payload["runtime_env"]["working_dir"] == "gcs://_ray_pkg_abc.zip"
    assert payload["entrypoint"].startswith("exec python3 -I -c ")
    assert payload["entrypoint_label_selector"] == {"ray.io/node-id": "node-7"}
    assert payload["submission_id"].startswith("arena-run1-verify-")
    assert "entrypoint_label_selector" not in verifier(
        FakeCluster([{"status": "SUCCEEDED"}], WHOLE)
    )._payload("x", SENT)


@pytest.mark.parametrize(
    ("cluster", "said"),
    [
        (FakeCluster([{"status": "FAILED", "message": "exit code 1"}], WHOLE), "ended FAILED: exit code 1"),
        (FakeCluster([{"status": "STOPPED"}], WHOLE), "ended STOPPED"),
        (FakeCluster([{"status": "SUCCEEDED"}], WHOLE.rsplit("\n", 1)[0]), "cut short"),
        (FakeCluster([{"status": "SUCCEEDED"}], "garbage"), "not trusted"),
    ],
)
def test_a_reader_that_fails_or_prints_garbage_verifies_nothing(cluster: FakeCluster, said: str) -> None:
    verification = verifier(cluster).verify(SENT)
    assert verification.chosen is None and not verification.interrupted
    assert [s.step for s in verification.skipped] == [40, 20]
    assert all(s.why.startswith("not verified: ") and said in s.why for s in verification.skipped)
    assert "no checkpoint passed verification" in verification.evidence()


def test_a_submission_the_cluster_refuses_verifies_nothing() -> None:
    cluster = FakeCluster([{"status": "SUCCEEDED"}], WHOLE)
    cluster.submit_error = ClusterError("refused", "cluster 'lab' answered 400 to /api/jobs/: no")
    verification = verifier(cluster).verify(SENT)
    assert verification.chosen is None
    assert "could not be submitted to cluster 'lab'" in verification.skipped[0].why
    assert cluster.stopped, "a submission that may have reached Ray is asked to stop"


def test_a_reader_that_outlives_its_deadline_is_stopped_and_verifies_nothing() -> None:
    cluster = FakeCluster(
        [ClusterError("unreachable", "cluster 'lab' is not reachable"), {"status": "RUNNING"}]
    )
    verification = verifier(cluster, deadline_seconds=0.05).verify(SENT)
    assert verification.chosen is None and not verification.interrupted
    assert "did not finish within 0.05 s" in verification.skipped[0].why
    assert cluster.stopped == [cluster.payloads[0]["submission_id"]]


def test_a_stop_request_while_reading_ends_it_interrupted() -> None:
    cluster = FakeCluster([{"status": "RUNNING"}])
    verification = verifier(cluster, stop=True).verify(SENT)
    assert verification.interrupted and verification.chosen is None
    assert cluster.stopped == [cluster.payloads[0]["submission_id"]]


def test_candidates_without_a_path_are_judged_without_a_reader() -> None:
    cluster = FakeCluster([{"status": "SUCCEEDED"}])
    verification = verifier(cluster).verify([record(40, "")])
    assert verification.chosen is None and cluster.payloads == []
    assert "without a path" in verification.skipped[0].why


@pytest.mark.parametrize(
    ("argv", "python"),
    [
        (["/opt/venv/bin/python3.11", "train.py"], "/opt/venv/bin/python3.11"),
        (["python", "train.py"], "python"),
        (["C:\\Py\\python.exe", "-E", "t.py"], "C:\\Py\\python.exe"),
        (["torchrun", "train.py"], "python3"),
        ([], "python3"),
    ],
)
def test_the_reader_runs_with_the_trainers_python_when_it_is_one(argv: list[str], python: str) -> None:
    assert reader_python(argv) == python
