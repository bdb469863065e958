"""AR014: saves must be announced in a way the supervisor reads, and its quick fix."""

from __future__ import annotations

import ast

import pytest

from arena_ls.gates import lint_trainer
from arena_ls.run.trainer_announcements import Checkpoint, EventParser
from tests.gates.support import FIXTURES, apply_edits, only

UNANNOUNCED = (FIXTURES / "ar014" / "fires_save_never_announced.py").read_text()
PLAIN_LINE = UNANNOUNCED.replace(
    "    pass  # the supervisor never hears which step was saved", '    print(f"ckpt {step} written")'
)


def test_the_jobs_checkpoint_pattern_counts_as_an_announcement() -> None:
    assert only(lint_trainer(PLAIN_LINE, fp32_only=True), "AR014")
    with_pattern = lint_trainer(
        PLAIN_LINE, fp32_only=True, checkpoint_patterns=(r"ckpt (?P<step>\d+) written",)
    )
    assert not only(with_pattern, "AR014")


def test_a_bad_job_pattern_is_ignored_not_a_crash() -> None:
    found = lint_trainer(PLAIN_LINE, fp32_only=True, checkpoint_patterns=("(unclosed",))
    assert only(found, "AR014")


def test_the_message_names_the_job_pattern_when_there_is_one() -> None:
    [finding] = only(
        lint_trainer(PLAIN_LINE, fp32_only=True, checkpoint_patterns=(r"never (?P<step>\d+)",)), "AR014"
    )
    assert "checkpoint.pattern" in finding.message


def test_the_quick_fix_announces_after_every_save_and_imports_json() -> None:
    source = UNANNOUNCED.replace("import json\n", "")
    [finding] = only(lint_trainer(source, fp32_only=True), "AR014")
    assert finding.fix_title and finding.edits
    fixed = apply_edits(source, finding.edits)
    ast.parse(fixed)
    assert fixed.count("import json") == 1
    assert fixed.count('"event": "checkpoint"') == 1  # one save helper, called twice
    assert not only(lint_trainer(fixed, fp32_only=True), "AR014")


def test_the_quick_fix_after_a_save_in_the_loop_uses_the_saved_step() -> None:
    source = (
        "import torch\n"
        "for it, batch in enumerate(loader):\n"
        "    loss = model(batch)\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    if it % 100 == 0:\n"
        '        torch.save({"optimizer": optimizer.state_dict(), "iter_num": it}, path)\n'
    )
    [finding] = only(lint_trainer(source), "AR014")
    fixed = apply_edits(source, finding.edits)
    assert '"step": int(it), "path": str(path)' in fixed
    assert fixed.splitlines()[-1].startswith("        print(")


def test_no_quick_fix_when_the_save_shares_its_line_with_an_if() -> None:
    source = (
        "import torch\n"
        "for step in range(10):\n"
        "    loss.backward()\n"
        "    if step % 5 == 0: torch.save({'optimizer': o.state_dict(), 'step': step}, p)\n"
    )
    [finding] = only(lint_trainer(source), "AR014")
    assert finding.edits == ()


def test_a_docstring_that_mentions_a_checkpoint_line_is_not_an_announcement() -> None:
    source = '"""Prints saved checkpoint to x at step 5 (it does not)."""\n' + UNANNOUNCED
    assert only(lint_trainer(source, fp32_only=True), "AR014")


@pytest.mark.parametrize(
    "line",
    [
        "saved checkpoint to checkpoints/ckpt.pt at step 200",
        "Saving checkpoint (step=200)",
        "2026-01-01 INFO checkpoint saved: step=200 path=ckpt.pt",
        "saving checkpoint ckpt.pt step 200",
        "Saving model checkpoint to out/checkpoint-200",
        "CheckPoint saved: step=200 path=ckpt.pt",  # the patterns ignore case: so must their pre-test
        "SAVED CHECKPOINT TO CKPT.PT AT STEP 200",
    ],
)
def test_the_gate_and_the_supervisor_agree_on_the_built_in_spellings(line: str) -> None:
    event = EventParser().parse(line)
    assert isinstance(event, Checkpoint) and event.step == 200
    source = UNANNOUNCED.replace(
        "    pass  # the supervisor never hears which step was saved", f"    print({line!r})"
    )
    assert not only(lint_trainer(source, fp32_only=True), "AR014")


def test_the_supervisor_reads_built_in_lines_in_a_flood_too() -> None:
    flood = b"x" * 10_000 + b"\nsaved checkpoint to c.pt at step 42\n" + b"y" * 10_000 + b"\n"
    events = list(EventParser().parse_flood(flood))
    assert Checkpoint(step=42, path="c.pt") in events
    camel = list(EventParser().parse_flood(flood.replace(b"saved checkpoint", b"Saved CheckPoint")))
    assert Checkpoint(step=42, path="c.pt") in camel


def test_a_jobs_checkpoint_pattern_replaces_the_built_in_spellings() -> None:
    parser = EventParser.for_patterns(None, r"ckpt (?P<step>\d+)")
    assert parser.parse("saved checkpoint to c.pt at step 5") is None
    assert parser.parse("ckpt 7") == Checkpoint(step=7, path="")


def test_with_a_job_pattern_the_gate_no_longer_accepts_the_built_in_spellings() -> None:
    source = UNANNOUNCED.replace(
        "    pass  # the supervisor never hears which step was saved",
        '    print(f"saved checkpoint to ckpt.pt at step {step}")',
    )
    assert not only(lint_trainer(source, fp32_only=True), "AR014")
    assert only(lint_trainer(source, fp32_only=True, checkpoint_patterns=(r"ckpt (?P<step>\d+)",)), "AR014")


def test_a_trainer_that_speaks_arena_is_not_counted_twice() -> None:
    parser = EventParser()
    plain = parser.parse("saved checkpoint step=500 path=checkpoints/x.pt")
    assert plain == Checkpoint(step=500, path="checkpoints/x.pt")
    arena = parser.parse('@arena {"event": "checkpoint", "step": 500, "path": "checkpoints/x.pt"}')
    assert arena == Checkpoint(step=500, path="checkpoints/x.pt")
    assert parser.parse("saved checkpoint step=600 path=checkpoints/x.pt") is None


def test_no_quick_fix_when_no_step_is_visible_at_the_save() -> None:
    source = (
        "import torch\n"
        "def save_checkpoint(state, filename):\n"
        "    torch.save(state, filename)\n"
        "for epoch in range(90):\n"
        "    for x in loader:\n"
        "        model(x.cuda()).sum().backward()\n"
        "        optimizer.step()\n"
        "    save_checkpoint({'epoch': epoch, 'optimizer': optimizer.state_dict()}, 'c.pt')\n"
    )
    [finding] = only(lint_trainer(source), "AR014")
    assert finding.edits == ()  # `step` would not exist inside save_checkpoint


def test_the_quick_fix_imports_json_when_only_dumps_is_imported() -> None:
    source = UNANNOUNCED.replace("import json\n", "from json import dumps\n")
    [finding] = only(lint_trainer(source, fp32_only=True), "AR014")
    fixed = apply_edits(source, finding.edits)
    assert "\nimport json\n" in "\n" + fixed
    assert not only(lint_trainer(fixed, fp32_only=True), "AR014")
