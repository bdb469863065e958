"""Issue 39 item 4: the gates and the launch judge the same bytes.

The gate cache keeps a verdict while a trainer's size, modification time and
inode stay the same; ``cp -p``, ``rsync -t`` and ``tar`` all rewrite a file in
place and put its mtime back. A start reads and hashes the trainer itself (one
hash per start), and the exec-time check compares the file with the bytes the
gates judged, not with what is there when the spec is written.
"""

from __future__ import annotations

import os
from pathlib import Path

from arena_ls.agent.exec_check import exec_check, exec_refusal
from arena_ls.gates.cache import TrainerGates
from arena_ls.manifest.cache import ManifestCache
from tests.helpers.lsp import ArenaClient, job, make_workspace, poll_until, start_server, stop_server

UNGATED = b"# arena: ignore-file["
"""The fake trainer's first line, which keeps the gates off it."""
GATED = b"# arena: ignorX-file["
"""The same number of bytes, and the gates apply again: the trainer now fails them."""


def _rewrite_keeping_the_signature(trainer: Path) -> None:
    """What ``cp -p`` over the file does: new bytes in place (same inode), same size, mtime put back."""
    before = trainer.stat()
    text = trainer.read_bytes()
    assert text.startswith(UNGATED)
    with open(trainer, "r+b") as handle:
        handle.write(GATED + text[len(UNGATED) :])
    os.utime(trainer, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = trainer.stat()
    kept = (before.st_size, before.st_mtime_ns, before.st_ino)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == kept


async def test_a_trainer_rewritten_in_place_with_its_mtime_put_back_is_refused(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("t", "--steps", "50", kind="train")])
    client = await start_server(root)
    try:
        dry = await client.call("arena/start", {"id": "t", "dryRun": True})
        assert dry["gates"] == [], dry  # the gates passed, and their verdict is cached
        await poll_until(lambda: _checked(client), "no lint of the trainer in flight")  # none reads after
        _rewrite_keeping_the_signature(root / "fake_trainer.py")
        error = await client.call_error("arena/start", {"id": "t"})
        assert (error.code, error.data["reason"]) == (1004, "gates-failed"), error
        assert "changed since the gates last read it" in error.message, error.message
        status = await client.call("arena/status", {})
        assert status["runs"] == [] and status["active"] is None, status
        blocked = next(j for j in status["jobs"] if j["id"] == "t")["blockedBy"]
        assert blocked, "status tells the new verdict too once a start read the file"
    finally:
        await stop_server(client)


async def _checked(client: ArenaClient) -> bool:
    """The status's lints have ended (a lint begun before the rewrite would cache the new bytes
    under the old signature if it read them after it: the start would then not know they changed)."""
    status = await client.call("arena/status", {})
    return not any("still checking" in d["message"] for j in status["jobs"] for d in j["blockedBy"])


def test_the_exec_check_compares_the_bytes_the_gates_judged(tmp_path: Path) -> None:
    """A swap between the gates' read and the spec's writing is refused right before the exec."""
    root = make_workspace(tmp_path / "ws", [job("t", kind="train")])
    cache = ManifestCache()
    manifest_path = root / "training" / "manifest.json"
    gates = TrainerGates(root, lambda: cache.get(manifest_path, root, None), lambda: None)
    trained = cache.get(manifest_path, root, None).jobs["t"]
    verdict = gates.verdict(trained)
    assert verdict.errors == [] and verdict.digest and not verdict.changed_unseen
    _rewrite_keeping_the_signature(root / "fake_trainer.py")  # after the gates, before the spec
    check = exec_check(
        str(root), ["python", "fake_trainer.py"], "fake_trainer.py", [str(root)],
        command_is_path=False, judged=verdict.judged(),
    )  # fmt: skip
    refused = exec_refusal(check)
    assert refused is not None and "changed since the gates passed" in refused, refused
    again = gates.verdict(trained)
    assert again.changed_unseen and again.errors, "the next start reads the new bytes and says so"
