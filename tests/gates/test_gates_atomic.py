"""AR015 checkpoint-atomic: a save straight to its final path, and its quick fix."""

from __future__ import annotations

import ast

from arena_ls.gates import lint_trainer
from tests.gates.support import FIXTURES, apply_edits, only

FIRES = (FIXTURES / "ar015" / "fires_overwrites_in_place.py").read_text(encoding="utf-8")


def _ar015(source: str) -> list[object]:
    return list(only(lint_trainer(source, fp32_only=True), "AR015"))


def test_the_fix_saves_to_a_temporary_file_then_replaces_and_no_longer_fires() -> None:
    finding = only(lint_trainer(FIRES, fp32_only=True), "AR015")[0]
    assert finding.severity == "warning"
    assert finding.fix_title is not None and "os.replace" in finding.fix_title
    fixed = apply_edits(FIRES, finding.edits)
    ast.parse(fixed)
    assert '"step": step}, "ckpt.pt.tmp")' in fixed
    assert '        os.replace("ckpt.pt.tmp", "ckpt.pt")\n' in fixed
    assert not _ar015(fixed)


def test_the_fix_adds_import_os_when_the_file_has_none_and_keeps_crlf() -> None:
    source = FIRES.replace("import os\n", "").replace(
        'stop_file = os.environ.get("ARENA_STOP_FILE", "STOP")', 'stop_file = "STOP"'
    )
    source = source.replace("os.path.exists", "Path.exists").replace("\n", "\r\n")
    finding = only(lint_trainer(source, fp32_only=True), "AR015")[0]
    fixed = apply_edits(source, finding.edits)
    assert (
        "\r\nimport os\r\n" in fixed
        or fixed.startswith("import os\r\n")
        or "\r\nimport os\r\nimport" in fixed
    )
    assert '\r\n        os.replace("ckpt.pt.tmp", "ckpt.pt")\r\n' in fixed
    assert not _ar015(fixed)


def test_a_path_held_in_a_variable_is_saved_beside_itself() -> None:
    source = FIRES.replace('}, "ckpt.pt")', "}, out_path)").replace(
        "while step < 1000:", 'out_path = os.path.join("out", "ckpt.pt")\nwhile step < 1000:'
    )
    finding = only(lint_trainer(source, fp32_only=True), "AR015")[0]
    fixed = apply_edits(source, finding.edits)
    assert '}, str(out_path) + ".tmp")' in fixed
    assert 'os.replace(str(out_path) + ".tmp", out_path)' in fixed
    assert not _ar015(fixed)


def test_a_path_computed_by_a_call_gets_no_fix_that_would_call_it_twice() -> None:
    source = FIRES.replace('}, "ckpt.pt")', "}, next_path())")
    finding = only(lint_trainer(source, fp32_only=True), "AR015")[0]
    assert finding.edits == ()


def test_a_file_that_imports_the_kit_is_fixed_with_the_kits_save() -> None:
    source = FIRES.replace("import json\n", "import json\n\nimport arena_trainer\n")
    finding = only(lint_trainer(source, fp32_only=True), "AR015")[0]
    fixed = apply_edits(source, finding.edits)
    assert (
        'arena_trainer.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, '
        '"ckpt.pt", step)' in fixed
    )
    assert "torch.save(" not in fixed.split("while step")[1]
    assert not _ar015(fixed)


def test_a_save_into_an_open_buffer_is_judged_at_the_open_only() -> None:
    buffered = FIRES.replace('}, "ckpt.pt")', "}, io.BytesIO())")
    assert not _ar015(buffered), "a buffer is not a file on disk"


def test_a_move_of_another_file_does_not_make_the_save_atomic() -> None:
    source = FIRES.replace(
        '        print("@arena "', '        os.replace("log.txt", "log.old")\n        print("@arena "'
    )
    assert _ar015(source)


def test_an_ignore_comment_silences_it() -> None:
    source = FIRES.replace('"step": step}, "ckpt.pt")', '"step": step}, "ckpt.pt")  # arena: ignore[AR015]')
    assert not _ar015(source)


def test_ar014s_fix_announces_the_final_path_of_an_atomic_save_not_its_temporary_file() -> None:
    atomic = FIRES.replace(
        '"step": step}, "ckpt.pt")',
        '"step": step}, "ckpt.pt.tmp")\n        os.replace("ckpt.pt.tmp", "ckpt.pt")',
    )
    announce = next(
        line for line in atomic.splitlines(keepends=True) if line.lstrip().startswith('print("@arena')
    )
    silent = atomic.replace(announce, "")
    assert not _ar015(silent)
    finding = only(lint_trainer(silent, fp32_only=True), "AR014")[0]
    fixed = apply_edits(silent, finding.edits)
    replaced = fixed.index('os.replace("ckpt.pt.tmp", "ckpt.pt")')
    announced = fixed.index(""""path": str('ckpt.pt')""")
    assert replaced < announced, "announced once the file is in place, with its final path"
    assert "str('ckpt.pt.tmp')" not in fixed
    assert not only(lint_trainer(fixed, fp32_only=True), "AR014") and not _ar015(fixed)
