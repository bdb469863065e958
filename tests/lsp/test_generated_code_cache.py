"""A real arena-ls keeps its classes' generated methods between starts (``arena_ls/codecache.py``),
and a damaged cache never stops one from starting."""

from __future__ import annotations

from pathlib import Path

from arena_ls.codecache import cache_file, read_entries
from tests.helpers.lsp import job, make_workspace, start_server, stop_server

ATTRS_CLASSES_AT_LEAST = 500
"""lsprotocol's classes alone are some 650; a server that kept fewer kept only part of its start."""


async def _session(root: Path, cache_home: Path) -> None:
    client = await start_server(root, env={"XDG_CACHE_HOME": str(cache_home), "ARENA_CODE_CACHE": "on"})
    try:
        status = await client.protocol.send_request_async("arena/status", {})
        assert {item["id"] for item in status["jobs"]} == {"quick"}
    finally:
        await stop_server(client)


async def test_a_second_server_starts_from_what_the_first_compiled_and_a_damaged_file_costs_nothing(
    tmp_path: Path,
) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    cached = cache_file(tmp_path / "cache" / "arena-ls")
    await _session(root, tmp_path / "cache")
    first = read_entries(cached)
    assert len(first) >= ATTRS_CLASSES_AT_LEAST, "the server saves what its start compiled"

    await _session(root, tmp_path / "cache")
    assert read_entries(cached).keys() >= first.keys(), "what was kept stays kept"

    cached.write_bytes(cached.read_bytes()[: len(cached.read_bytes()) // 2])  # cut short, as by a crash
    await _session(root, tmp_path / "cache")
    assert len(read_entries(cached)) >= ATTRS_CLASSES_AT_LEAST, "read as empty, then written whole again"
