"""Verifying a cluster run's checkpoints on the cluster, before any resume (contract 8.2).

A cluster run's files are where it ran, so they are read there: ``ClusterVerifier`` submits
``ckpt_reader`` (standard library only, its source passed to ``python -I -c``; an argv list,
quoted by ``submission.entrypoint``) as a Ray job with the run's own ``working_dir`` package
(Ray extracts one package URI to one folder per node: the trainer's relative paths resolve
there as they did for the trainer), pinned to the node the trainer last ran on when it asked
for resources (else Ray puts both on the head node). Its output, one JSON reading per
candidate, becomes the ``Look`` that ``ckptverify.verify`` judges with the same pure ``judge``
as a local run's files: nothing about a verdict is decided on the cluster.

Never a guess in the direction that overwrites: a reader that cannot be submitted, fails, is
stopped, outlives ``VERIFY_SECONDS`` or prints output that is malformed or cut short verifies
nothing (every candidate is skipped, naming why, and the run ends ``resume-unknown``). A stop
request while it runs stops the reader and answers ``Verification(interrupted=True)``.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from arena_ls.cluster import ckpt_reader
from arena_ls.cluster.jobsapi import ClusterError, JobsClient
from arena_ls.cluster.status import SUCCEEDED, TERMINAL
from arena_ls.cluster.submission import entrypoint
from arena_ls.lifecycle import ckptverify
from arena_ls.lifecycle.ckptverify import QUIET_SECONDS, Reading, Verification
from arena_ls.lifecycle.rundir import CheckpointRecord, RunSpec, SkippedCheckpoint

VERIFY_SECONDS = 300.0
"""How long the reader may take on the cluster (its submission, start and reading) in all."""
READER_MARGIN_SECONDS = 60.0
"""Of ``VERIFY_SECONDS``, what the reader leaves for Ray to start it: it stops hashing at the rest."""
POLL_SECONDS = 0.25
NODE_LABEL = "ray.io/node-id"
"""Ray's label of each node's id (``entrypoint_label_selector`` pins the reader to one node)."""
VERIFIES = "arena.verifies"
"""The reader's submission's metadata key (its value: the run it verifies for)."""
_PYTHON = re.compile(r"python[0-9.]*(\.exe)?", re.IGNORECASE)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_INTS = ("size", "mtime_ns", "later_size", "later_mtime_ns")


def reader_python(argv: Sequence[str]) -> str:
    """The interpreter the reader runs with: the trainer's own when its command is a Python
    (it ran on the cluster), else ``python3``."""
    if argv and _PYTHON.fullmatch(Path(argv[0].replace("\\", "/")).name):
        return argv[0]
    return "python3"


def reader_source() -> str:
    """``ckpt_reader``'s source, as ``python -c`` runs it on the cluster."""
    return Path(ckpt_reader.__file__).read_text(encoding="utf-8")


def request_for(sent: Sequence[CheckpointRecord], deadline_seconds: float) -> dict[str, Any]:
    """The reader's ``REQUEST`` (see ``ckpt_reader``): the candidates with a path, newest first."""
    return {
        "candidates": [{"path": r.path, "bytes": r.bytes, "sha256": r.sha256} for r in sent],
        "quietSeconds": QUIET_SECONDS,
        "deadlineSeconds": max(1.0, deadline_seconds - READER_MARGIN_SECONDS),
    }


class Malformed(ValueError):
    """The reader's output is not what it prints: not trusted."""


def parse_readings(output: str, sent: Sequence[CheckpointRecord]) -> dict[int, Reading]:
    """The readings in the reader's ``output`` by candidate index; ``Malformed`` unless every
    reading line is whole and in order, names the candidate it was sent, and the ``END`` line
    counts them all (output cut short, or mixed with another's, verifies nothing)."""
    readings: dict[int, Reading] = {}
    for number, line in enumerate(output.splitlines(), 1):
        if line.startswith(ckpt_reader.END):
            if _json_object(line, ckpt_reader.END, number).get("readings") != len(readings):
                raise Malformed(f"its last line counts other readings than it printed ({line[:120]!r})")
            return readings
        if line.startswith(ckpt_reader.READING):
            fields = _json_object(line, ckpt_reader.READING, number)
            index = len(readings)
            if index >= len(sent) or fields.get("index") != index or fields.get("path") != sent[index].path:
                raise Malformed(f"line {number} is not the reading of candidate {index}: {line[:120]!r}")
            readings[index] = _reading(fields, number)
    raise Malformed("it ended before its last line (cut short)")


def _json_object(line: str, prefix: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line[len(prefix) :])
    except ValueError:
        raise Malformed(f"line {number} is not JSON: {line[:120]!r}") from None
    if not isinstance(value, dict):
        raise Malformed(f"line {number} is not a JSON object: {line[:120]!r}")
    return value


def _reading(fields: dict[str, Any], number: int) -> Reading:
    """One ``ckptverify.Reading`` from a reading line's fields, every field of its type."""
    ints = {name: fields.get(name) for name in _INTS}
    sha256, error = fields.get("sha256"), fields.get("error")
    if (
        not isinstance(fields.get("exists"), bool)
        or not isinstance(fields.get("is_folder", False), bool)
        or any(v is not None and (type(v) is not int or v < 0) for v in ints.values())
        or (sha256 is not None and not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)))
        or (error is not None and not isinstance(error, str))
        or (fields["exists"] and error is None and (ints["size"] is None or ints["mtime_ns"] is None))
    ):
        raise Malformed(f"line {number} has a field of the wrong type: {json.dumps(fields)[:160]}")
    return Reading(
        exists=fields["exists"],
        size=ints["size"],
        mtime_ns=ints["mtime_ns"],
        later_size=ints["later_size"],
        later_mtime_ns=ints["later_mtime_ns"],
        is_folder=bool(fields.get("is_folder", False)),
        sha256=sha256,
        error=error,
    )


def not_verified(ordered: Sequence[CheckpointRecord], why: str) -> Verification:
    """Nothing verified: every candidate skipped with ``why`` (the run ends ``resume-unknown``)."""
    skipped = tuple(SkippedCheckpoint(r.step, r.path, f"not verified: {why}") for r in ordered)
    return Verification(None, None, skipped)


def judged(ordered: Sequence[CheckpointRecord], readings: dict[int, Reading]) -> Verification:
    """``ckptverify.verify`` over the cluster's readings (a candidate the reader did not reach,
    because it stopped at one that passed there, is failed here if it is ever asked for)."""
    index_of = {id(r): i for i, r in enumerate(r for r in ordered if r.path)}

    def look(record: CheckpointRecord) -> Reading | None:
        if not record.path:
            return None
        found = readings.get(index_of[id(record)])
        return found or Reading(exists=False, error="the reader on the cluster did not reach it")

    return ckptverify.verify(ordered, look)


class Interrupted(Exception):
    """A stop request arrived while the reader ran (the reader was asked to stop)."""


@attrs.define
class ClusterVerifier:
    """One verification on one cluster (see the module docstring)."""

    client: JobsClient
    cluster: str
    run_id: str
    package: Callable[[], str]
    """The run's ``working_dir`` package URI (built and uploaded when not yet)."""
    python: str
    stop_requested: Callable[[], bool]
    node_id: str | None = None
    """The node to read on (the trainer's last), or None: where Ray puts a job asking for nothing."""
    deadline_seconds: float = VERIFY_SECONDS
    poll_seconds: float = POLL_SECONDS
    submission_id: str | None = None

    def verify(self, ordered: Sequence[CheckpointRecord]) -> Verification:
        """The newest of ``ordered`` that passes, read on the cluster (see the module docstring)."""
        sent = [r for r in ordered if r.path]
        if not sent:
            return ckptverify.verify(ordered, lambda record: None)
        try:
            output = self._read(sent)
        except Interrupted:
            return Verification(None, None, (), interrupted=True)
        except Malformed as error:
            return not_verified(ordered, f"the checkpoint reader's output on cluster {self.cluster!r} "
                                         f"is not trusted: {error}")  # fmt: skip
        except _NotRead as error:
            return not_verified(ordered, str(error))
        return judged(ordered, output)

    def _read(self, sent: Sequence[CheckpointRecord]) -> dict[int, Reading]:
        started = time.monotonic()
        sid = self.submission_id = f"arena-{self.run_id}-verify-{secrets.token_hex(4)}"
        try:
            self.client.submit(self._payload(sid, sent))
        except (ClusterError, OSError, ValueError) as error:
            self._stop(sid)  # it may have reached Ray: never left reading
            raise _NotRead(f"the checkpoint reader could not be submitted to cluster {self.cluster!r}: "
                           f"{error}") from None  # fmt: skip
        info = self._wait(sid, started)
        if info.get("status") != SUCCEEDED:
            message = str(info.get("message") or "")[:300]
            raise _NotRead(f"the checkpoint reader {sid} on cluster {self.cluster!r} ended "
                           f"{info.get('status')}: {message}")  # fmt: skip
        try:
            output = self.client.logs(sid)
        except ClusterError as error:
            raise _NotRead(f"the checkpoint reader's output could not be read: {error}") from None
        return parse_readings(output, sent)

    def _payload(self, sid: str, sent: Sequence[CheckpointRecord]) -> dict[str, Any]:
        request = json.dumps(request_for(sent, self.deadline_seconds))
        payload: dict[str, Any] = {
            "entrypoint": entrypoint([self.python, "-I", "-c", reader_source(), request]),
            "submission_id": sid,
            "runtime_env": {
                "working_dir": self.package(),
                "env_vars": {"PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"},
            },
            "metadata": {VERIFIES: self.run_id},
        }
        if self.node_id is not None:
            payload["entrypoint_label_selector"] = {NODE_LABEL: self.node_id}
        return payload

    def _wait(self, sid: str, started: float) -> dict[str, Any]:
        """The reader's final job details (``Interrupted``: a stop request; ``_NotRead``: too late)."""
        last_error = ""
        while True:
            if self.stop_requested():
                self._stop(sid)
                raise Interrupted
            try:
                info = self.client.info(sid)
                if info.get("status") in TERMINAL:
                    return info
            except ClusterError as error:
                last_error = f" (last answer: {error})"
            if time.monotonic() - started > self.deadline_seconds:
                self._stop(sid)
                raise _NotRead(f"the checkpoint reader {sid} on cluster {self.cluster!r} did not finish "
                               f"within {self.deadline_seconds:g} s{last_error}")  # fmt: skip
            time.sleep(self.poll_seconds)

    def _stop(self, sid: str) -> None:
        with contextlib.suppress(ClusterError, OSError):
            self.client.stop(sid)


class _NotRead(Exception):
    """The reader gave no readings (not submitted, failed, too slow): nothing is verified."""


def driver_node(client: JobsClient, submission_id: str | None) -> str | None:
    """The node the submission's entrypoint ran on (Ray's ``driver_node_id``), when Ray says."""
    if submission_id is None:
        return None
    try:
        node = client.info(submission_id).get("driver_node_id")
    except ClusterError:
        return None
    return node if isinstance(node, str) and node else None


def verify_on_cluster(
    client: JobsClient | None,
    spec: RunSpec,
    last_submission: str | None,
    package: Callable[[], str],
    stop_requested: Callable[[], bool],
    ordered: Sequence[CheckpointRecord],
) -> Verification:
    """``RayTrainer.verify``: ``ordered`` read by a ``ClusterVerifier`` on the run's cluster,
    on the node of its last submission when the job asks for resources (it may have run on a
    worker node; a job asking for none runs on the head node, as the reader does)."""
    cluster = spec.cluster
    if client is None or cluster is None:
        return not_verified(ordered, "the cluster is not connected: its files cannot be read")
    node = driver_node(client, last_submission) if cluster.resources else None
    verifier = ClusterVerifier(
        client, cluster.name, spec.run_id, package, reader_python(spec.argv), stop_requested, node,
        deadline_seconds=VERIFY_SECONDS, poll_seconds=POLL_SECONDS,
    )  # fmt: skip
    return verifier.verify(ordered)
