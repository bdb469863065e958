"""A hostile client over stdio, against the real ``arena-ls`` (contract 6.1).

Every case sends what an editor never would and then checks that the
request is answered with the LSP code, that nothing starts, and that the
server still answers the next request.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.lsp import WAIT, job, make_workspace, wait_for
from tests.protocol.raw import RawServer, frame, request


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    lines = job("lines", "--steps", "60", "--interval", "0.001", "--numbered")
    return make_workspace(tmp_path / "ws", [lines])


@pytest.fixture
async def server(workspace: Path) -> AsyncIterator[RawServer]:
    raw = await RawServer.start(workspace)
    yield raw
    raw.kill()
    await raw.process.wait()


async def ready(server: RawServer, workspace: Path) -> RawServer:
    answer = await server.initialize(workspace)
    assert "result" in answer, answer
    return server


def error_code(answer: dict[str, Any]) -> int:
    assert "error" in answer, answer
    code: int = answer["error"]["code"]
    return code


async def test_a_request_before_initialize_gets_32002_and_starts_nothing(
    server: RawServer, workspace: Path
) -> None:
    answer = await server.call(1, "arena/start", {"id": "lines"})
    assert error_code(answer) == -32002
    assert "traceback" not in json.dumps(answer)
    assert error_code(await server.call(2, "arena/status", {})) == -32002
    await ready(server, workspace)
    status = await server.call(3, "arena/status", {})
    assert status["result"]["runs"] == []
    assert not (workspace / ".aide" / "training" / "runs").exists() or not any(
        (workspace / ".aide" / "training" / "runs").iterdir()
    )


async def test_ids_that_are_not_a_number_or_a_string_get_32600(server: RawServer, workspace: Path) -> None:
    await ready(server, workspace)
    for bad_id in [{"a": 1}, [1], True, 1.5, "x" * 5000]:
        server.send(request(bad_id, "arena/status", {}))
        answer = await server.null_id_error()
        assert answer["error"]["code"] == -32600
        assert len(json.dumps(answer)) < 600
    assert "result" in await server.call(10, "arena/status", {})


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"null", -32600),
        (b"[]", -32600),
        (b"42", -32600),
        (b'{"jsonrpc": "2.0", "id": 4, "method": "arena/status", ', -32700),
        (b"\xff\xfe\xfd", -32700),
        (b'{"jsonrpc": "1.0", "id": 4, "method": "arena/status"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 4, "method": 12}', -32600),
    ],
)
async def test_bodies_that_are_not_requests_are_answered(
    server: RawServer, workspace: Path, payload: bytes, code: int
) -> None:
    await ready(server, workspace)
    server.send(payload)
    answer = await server.response(4) if b'"id": 4' in payload else await server.null_id_error()
    assert error_code(answer) == code
    assert "result" in await server.call(5, "arena/status", {})


def _status(msg_id: int) -> bytes:
    return json.dumps(request(msg_id, "arena/status", {})).encode()


FRAMES = {
    "one byte short": lambda b: frame(b, length=len(b) - 1),
    "one byte long": lambda b: frame(b, length=len(b) + 1),
    "negative": lambda b: b"Content-Length: -5\r\n\r\n" + b,
    "zero": lambda b: b"Content-Length: 0\r\n\r\n" + b,
    "not a number": lambda b: b"Content-Length: twelve\r\n\r\n" + b,
    "lowercase header": lambda b: frame(b, header="content-length"),
    "LF only": lambda b: b"Content-Length: %d\n\n" % len(b) + b,
}


async def test_every_broken_frame_is_answered_and_the_server_goes_on(
    server: RawServer, workspace: Path
) -> None:
    """Each broken frame alone (the client then waits), then a good request."""
    await ready(server, workspace)
    for number, (name, make) in enumerate(FRAMES.items()):
        bad, good = 100 + number, 200 + number
        server.write(make(_status(bad)))
        answer = await server.response(bad)
        if name in ("lowercase header", "LF only"):
            assert "result" in answer, (name, answer)
        else:
            assert error_code(answer) == -32700, (name, answer)
        assert "result" in await server.call(good, "arena/status", {}), name


async def test_broken_frames_followed_at_once_by_good_ones(server: RawServer, workspace: Path) -> None:
    """The client does not wait: the next frame is already in the pipe behind the broken one."""
    await ready(server, workspace)
    data = b"".join(
        make(_status(300 + n)) + frame(_status(400 + n)) for n, make in enumerate(FRAMES.values())
    )
    server.write(data)
    for number in range(len(FRAMES)):
        assert "result" in await server.response(400 + number)
        assert "id" in await server.response(300 + number)


async def test_exit_without_shutdown_is_exit_code_1(server: RawServer, workspace: Path) -> None:
    await ready(server, workspace)
    server.send({"jsonrpc": "2.0", "method": "exit"})
    assert await asyncio.wait_for(server.process.wait(), WAIT) == 1


async def test_after_shutdown_requests_get_32600_and_exit_is_0(server: RawServer, workspace: Path) -> None:
    await ready(server, workspace)
    assert "result" in await server.call(1, "shutdown")
    assert error_code(await server.call(2, "arena/status", {})) == -32600
    server.send({"jsonrpc": "2.0", "method": "exit"})
    assert await asyncio.wait_for(server.process.wait(), WAIT) == 0


async def test_a_stream_cut_inside_a_frame_ends_the_server_non_zero(
    server: RawServer, workspace: Path
) -> None:
    await ready(server, workspace)
    server.write(frame(_status(1))[:-5])
    assert await server.finish() == 1
    assert "inside a frame" in await server.stderr_text()


async def test_params_array_means_empty_object(server: RawServer, workspace: Path) -> None:
    await ready(server, workspace)
    assert "result" in await server.call(1, "arena/status", [])
    assert "result" in await server.call(2, "arena/metrics", [])
    assert error_code(await server.call(3, "arena/start", [])) == -32602


async def test_echoes_are_bounded_and_absurd_numbers_refused(server: RawServer, workspace: Path) -> None:
    await ready(server, workspace)
    huge = "j" * 2_000_000
    answer = await server.call(1, "arena/start", {"id": huge})
    assert error_code(answer) == 1001
    assert len(json.dumps(answer["error"])) < 1000
    answer = await server.call(2, "arena/logs", {"runId": huge})
    assert error_code(answer) == -32602 and len(json.dumps(answer["error"])) < 1000
    for method, params in [
        ("arena/start", {"id": "lines", "startStep": 2**70}),
        ("arena/logs", {"limit": 2**70}),
        ("arena/stop", {"graceSeconds": 1e300}),
    ]:
        answer = await server.call(3, method, params)
        assert error_code(answer) == -32602, (method, answer)
    command = "workspace/executeCommand"
    answer = await server.call(6, command, {"command": "arena.showBlocked", "arguments": [{"id": huge}]})
    assert "result" in answer and len(json.dumps(answer)) < 1000, "the id is echoed cut short"
    assert all(len(json.dumps(note)) < 1000 for note in server.notifications), "and so in its message"
    answer = await server.call(7, command, {"command": "arena.showBlocked", "arguments": [{"id": ["x"]}]})
    assert error_code(answer) == -32602 and "id" in answer["error"]["message"]
    answer = await server.call(4, "x" * 1_000_000, {})
    assert error_code(answer) == -32601 and len(json.dumps(answer["error"])) < 1000
    status = await server.call(5, "arena/status", {})
    assert status["result"]["runs"] == []


async def wait_final(server: RawServer, run_id: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT
    for attempt in itertools.count():
        status = await server.call(f"status-{attempt}", "arena/status", {})
        runs = {run["runId"]: run["status"] for run in status["result"]["runs"]}
        if runs.get(run_id) in ("succeeded", "crashed", "lost", "stopped"):
            assert runs[run_id] == "succeeded", status
            return
        assert asyncio.get_running_loop().time() < deadline, f"run {run_id} did not finish: {runs}"
        await asyncio.sleep(0.05)


def _cursor(payload: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


async def test_forged_cursors_get_32602_and_never_block_the_server(
    server: RawServer, workspace: Path
) -> None:
    await ready(server, workspace)
    started = await server.call(1, "arena/start", {"id": "lines"})
    run_id = started["result"]["runId"]
    await wait_final(server, run_id)
    first = (await server.call(2, "arena/logs", {"runId": run_id, "limit": 10}))["result"]
    assert len(first["lines"]) == 10
    real = json.loads(base64.urlsafe_b64decode(first["cursor"] + "=" * (-len(first["cursor"]) % 4)))
    assert real["r"] >= 1
    forged = {
        "50,000 entries": _cursor({**real, "p": {str(i): [0, 0] for i in range(50_000)}}),
        "negative record": _cursor({**real, "r": -1}),
        "negative open line": _cursor({**real, "p": {"0": [-3, 0]}}),
        "offset moved mid-line": _cursor({**real, "o": real["o"] + 3}),
        "seq past its record": _cursor({**real, "s": real["s"] + 10_000}),
        "huge": _cursor({**real, "r": 2**70}),
        "not base64": "%%%",
        "stream out of range": _cursor({**real, "p": {"9": [0, 0]}}),
    }
    for number, (name, cursor) in enumerate(forged.items()):
        # A concurrent arena/status is the server's responsiveness: it must be answered.
        server.send(request(500 + number, "arena/logs", {"runId": run_id, "cursor": cursor}))
        server.send(request(600 + number, "arena/status", {}))
        answer = await server.response(500 + number)
        assert error_code(answer) == -32602, (name, answer)
        assert "result" in await server.response(600 + number, timeout=10.0), name
    assert "result" in await server.call(700, "arena/logs", {"runId": run_id, "cursor": first["cursor"]})


async def test_a_client_that_leaves_without_shutdown_takes_the_servers_helpers_with_it(
    server: RawServer, workspace: Path
) -> None:
    """The editor is killed: its end of the server's stdin closes, no ``shutdown`` came. The server
    closes its view of the workspace and exits, and the processes it keeps beside itself (the
    spare agent, the gates worker) end with it; the run folder's runs are not its to stop. (A CI
    run left such a server waiting for ever in ``asyncio.run``'s last cancellation, its helpers
    beside it: ``test_follow_off_loop.py`` holds the cause.)"""
    await ready(server, workspace)
    assert "result" in await server.call(1, "arena/status", {})
    parent = psutil.Process(server.process.pid)
    await wait_for(lambda: any("--spare" in _command(child) for child in _children(parent)), what="a spare")
    helpers = _children(parent)  # the spare, and the gates worker when a lint has started it
    await server.finish()
    for helper in helpers:
        await wait_for(lambda helper=helper: not _alive(helper), what=f"{_command(helper)} ended")


def _children(parent: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return list(parent.children(recursive=True))
    return []


def _command(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(process.cmdline())
    return "(gone)"


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
