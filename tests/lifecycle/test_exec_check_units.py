"""``exec_check``: what a run's spec records of its gated paths, and what is refused right before an exec."""

from __future__ import annotations

import os
from pathlib import Path

from arena_ls.agent.exec_check import exec_check, exec_refusal


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text("print('train')\n")
    (root / "data" / "set.bin").write_bytes(b"\0" * 100)
    (root / "helper.py").write_text("print('helper')\n")
    return root


def _check(root: Path, *args: str, command: str = "/usr/bin/python3", command_is_path: bool = False) -> dict:
    return exec_check(str(root), [command, *args], "train.py", [str(root)], command_is_path=command_is_path)


def test_the_spec_records_the_gated_paths_inside_and_hashes_what_the_gates_read(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    (tmp_path / "elsewhere.txt").write_text("x")
    check = _check(
        root, "train.py", "--data", "data/set.bin", "data", "helper.py", str(tmp_path / "elsewhere.txt")
    )
    recorded = {Path(entry["path"]).name: entry["sha256"] for entry in check["paths"]}
    assert set(recorded) == {"ws", "train.py", "set.bin", "data", "helper.py"}
    assert recorded["train.py"] and recorded["helper.py"]
    assert recorded["set.bin"] is None and recorded["data"] is None and recorded["ws"] is None
    assert exec_refusal(check) is None
    assert exec_refusal(None) is None, "a spec written before the check existed"


def test_a_link_out_a_new_content_and_a_missing_file_are_refused_with_the_evidence(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    outside = tmp_path / "evil.py"
    outside.write_text("print('evil')\n")
    check = _check(root, "train.py", "data/set.bin")

    (root / "data" / "set.bin").unlink()
    os.symlink(outside, root / "data" / "set.bin")
    refused = exec_refusal(check)
    assert refused is not None and "set.bin now leads to" in refused and "outside the workspace" in refused

    (root / "data" / "set.bin").unlink()
    (root / "data" / "set.bin").write_bytes(b"other data of the same folder is fine")
    assert exec_refusal(check) is None, "data files are checked by their real path only"

    (root / "train.py").write_text("print('changed')\n")
    refused = exec_refusal(check)
    assert refused is not None and "train.py changed since the gates passed" in refused

    (root / "train.py").unlink()
    refused = exec_refusal(check)
    assert refused is not None and "train.py is gone" in refused


def test_a_parent_folder_swapped_for_a_link_out_is_refused(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    (root / "src").mkdir()
    (root / "src" / "run.py").write_text("print(1)\n")
    check = _check(root, "src/run.py")
    outside = tmp_path / "outside"
    (outside).mkdir()
    (outside / "run.py").write_text("print(1)\n")  # the same content, elsewhere
    (root / "src" / "run.py").unlink()
    (root / "src").rmdir()
    os.symlink(outside, root / "src")
    refused = exec_refusal(check)
    assert refused is not None and "outside the workspace" in refused


def test_a_command_path_inside_is_gated_and_the_owners_interpreter_is_not(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    tool = root / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    check = _check(root, "x", command=str(tool), command_is_path=True)
    assert str(tool) in [entry["path"] for entry in check["paths"]]
    tool.write_text("#!/bin/sh\necho changed\n")
    assert "changed since the gates passed" in (exec_refusal(check) or "")
    interpreter = _check(root, "train.py")
    assert all(not entry["path"].startswith("/usr") for entry in interpreter["paths"])


def test_a_second_root_is_allowed_like_the_workspace(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "lib.py").write_text("x = 1\n")
    check = exec_check(
        str(root), ["py", str(shared / "lib.py")], None, [str(root), str(shared)], command_is_path=False
    )
    assert str(shared / "lib.py") in [entry["path"] for entry in check["paths"]]
    assert exec_refusal(check) is None
    (shared / "lib.py").write_text("x = 2\n")
    refused = exec_refusal(check)
    assert refused is not None and "lib.py changed" in refused
