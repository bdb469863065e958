"""Issue 39 item 5: one checkpoint-word rule at every level, bytes and text.

The gate AR014 and the line parser ask ``mentions_checkpoint`` (text); the
agent marks a record quiet (``FLAG_QUIET``: never searched for a checkpoint
again) when ``chunk_mentions_checkpoint`` (bytes) finds no word. On main the
text folded case with ``str.lower`` and the bytes with ASCII only: a
``CHEC\\u212aPOINT`` line (KELVIN SIGN) passed the gates, was seen in a small
write and dropped in a 300 KB one, and a kill -9 relaunched from step 0. Both
now follow the built-in patterns' own rule (``re.IGNORECASE``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from arena_ls.gates import lint_trainer
from arena_ls.run.capture import STDOUT
from arena_ls.run.checkpoint_lines import (
    BUILTIN_CHECKPOINT_PATTERNS,
    FOLDED_INTO_THE_WORD,
    chunk_mentions_checkpoint,
    mentions_checkpoint,
)
from arena_ls.run.outputlog import OutputWriter
from arena_ls.run.trainer_announcements import ARENA_PREFIX, Checkpoint, EventParser
from tests.helpers.fuzzing import examples
from tests.helpers.lsp import ArenaClient, start_server, stop_server, wait_for, wait_status, write_manifest

TRAINER = Path(__file__).parent.parent / "fixtures" / "trainers" / "kelvin_ckpt_trainer.py"
KELVIN = "\u212a"
FOLDS = ["\u212a", "\u0130", "\u0131", "\u017f", "\u00df", "\u1e9e", "\u0345", "\u03b9", "\u1fbe", "\ufb01"]
"""KELVIN SIGN, I WITH DOT ABOVE, DOTLESS I, LONG S, SHARP S (both), the iotas that fold to one
another, the ``fi`` ligature: every character outside ASCII whose case folds anywhere near the word."""
WORDS = ["checkpoint", "CHECKPOINT", "CheckPoint", f"CHEC{KELVIN}POINT", "checkpo\u0131nt", "CHECKPO\u0130NT"]
LETTERS = st.sampled_from([*"checkpointCHECKPOINT", *FOLDS, *WORDS, "\n", " ", "\r", "\0", "@"])
TEXT = st.lists(st.one_of(LETTERS, st.text(max_size=6)), max_size=40).map("".join)


def the_patterns_letters() -> set[str]:
    """Every character outside ASCII that ``re.IGNORECASE`` takes for a letter of the word."""
    every_character = "".join(map(chr, range(128, sys.maxunicode + 1)))  # one search per letter, in C
    found: set[str] = set()
    for letter in set("checkpoint"):
        found |= set(re.findall(letter, every_character, re.IGNORECASE))
    return found


def test_the_folded_letters_are_all_the_patterns_fold() -> None:
    assert set(FOLDED_INTO_THE_WORD) == the_patterns_letters()


@given(TEXT)
@settings(max_examples=examples(400))
def test_the_bytes_and_the_text_answer_alike(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    assert chunk_mentions_checkpoint(data) == mentions_checkpoint(data.decode("utf-8", "replace"))


@given(TEXT)
@settings(max_examples=examples(200))
def test_the_text_test_lets_through_every_line_a_built_in_pattern_reads(text: str) -> None:
    line = f"saved {text} step=12 path=c.pt"
    if any(pattern.search(line) for pattern in BUILTIN_CHECKPOINT_PATTERNS):
        assert mentions_checkpoint(line), line


def _writer(tmp_path: Path) -> OutputWriter:
    folder = tmp_path / "run"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps({"runId": "r", "jobId": "j"}))
    return OutputWriter(folder, max_bytes=None)


def _check_records(writer: OutputWriter, pieces: list[bytes]) -> None:
    """Every record the writer keeps is quiet exactly when none of its lines mentions the word."""
    for piece in pieces:
        written = writer.append(STDOUT, piece)
        if written.complete:
            text = written.complete.decode("utf-8", "replace")
            # an announcement is "@arena " and its JSON (ARENA_PREFIX, the parser's): a bare "@arena"
            # announces nothing, and is quiet
            assert written.quiet == (ARENA_PREFIX not in text and not mentions_checkpoint(text)), text


@given(TEXT, st.lists(st.integers(min_value=0, max_value=400), max_size=6))
@example(text="@arena", cuts=[])  # found by CI: the word alone, no announcement (quiet)
@example(text='@arena {"event": "checkpoint"}', cuts=[3, 7])  # an announcement cut in its prefix
@settings(max_examples=examples(200), deadline=None)  # files under load: no timed assertion
def test_a_record_is_quiet_only_without_the_word_wherever_the_writes_cut(text: str, cuts: list[int]) -> None:
    data = (text + "\n").encode("utf-8", "surrogatepass")
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    with tempfile.TemporaryDirectory() as folder:
        _check_records(_writer(Path(folder)), [data[a:b] for a, b in itertools.pairwise(points)])


def test_the_kelvin_line_cut_at_every_offset_is_never_quiet(tmp_path: Path) -> None:
    line = f"noise\nsaved CHEC{KELVIN}POINT step=130 path=ckpt.pt\nmore noise\n".encode()
    for offset in range(len(line) + 1):
        writer = _writer(tmp_path / str(offset))
        records = [line[:offset], line[offset:]]
        _check_records(writer, records)


def test_the_kelvin_line_inside_300_kb_is_found_by_the_flood_parser() -> None:
    pad = b"noise " + b"n" * 94 + b"\n"
    for where in (0, 1500, 3071):
        lines = [pad] * 3072
        lines.insert(where, f"saved CHEC{KELVIN}POINT step=130 path=ckpt.pt\n".encode())
        data = b"".join(lines)
        assert chunk_mentions_checkpoint(data)
        events = list(EventParser().parse_flood(data))
        assert [e.step for e in events if isinstance(e, Checkpoint)] == [130], where


AR014_PASSES = (
    Path(__file__).parent.parent / "gates" / "fixtures" / "ar014" / "passes_builtin_saved_checkpoint.py"
)


def test_the_gates_pass_what_the_supervisor_reads_and_refuse_what_it_cannot() -> None:
    """AR014 asks the same rule: a spelling the supervisor reads passes, one it cannot is refused."""
    trainer = AR014_PASSES.read_text()
    assert 'print(f"saved checkpoint to ckpt.pt' in trainer
    for word in (f"CHEC{KELVIN}POINT", "checkpo\u0131nt", "CHECKPO\u0130NT", "checkpoint"):
        codes = [f.code for f in lint_trainer(trainer.replace("saved checkpoint", f"saved {word}"))]
        assert "AR014" not in codes, (word, codes)
        line = f"saved {word} to ckpt.pt at step 5"
        assert isinstance(EventParser().parse(line), Checkpoint), line
    unreadable = trainer.replace("saved checkpoint", "saved checkp\u00f6int")
    assert "AR014" in [f.code for f in lint_trainer(unreadable)]
    assert EventParser().parse("saved checkp\u00f6int to ckpt.pt at step 5") is None


async def test_a_kelvin_checkpoint_in_a_300_kb_write_is_resumed_after_a_kill_9(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(TRAINER, root / "kelvin_ckpt_trainer.py")
    spec = {
        "id": "k",
        "name": "Kelvin",
        "kind": "train",
        "status": "ready",
        "command": "{python}",
        "script": "kelvin_ckpt_trainer.py",
        "args": ["kelvin_ckpt_trainer.py", "--ckpt-every", "3", "--ckpt-until", "9"],
        "resume": {"args": ["--resume", "--start-step", "{step}"]},
        "restart": {"maxRestarts": 2, "backoffSeconds": 0.05},
    }
    write_manifest(root, [spec])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "k"})
        await wait_for(lambda: (root / "waiting").exists(), what="the trainer's ninth step")
        run = await wait_status(client, info["runId"], "running")
        os.kill(run["pid"], signal.SIGKILL)
        (root / "waiting").unlink()
        relaunched, again = root / "relaunched", root / "waiting"
        await wait_for(lambda: relaunched.exists() or again.exists(), what="the relaunch")
        assert relaunched.exists(), "the relaunch started from step 0 (its trainer reached step 9 again)"
        assert relaunched.read_text() == "--ckpt-every 3 --ckpt-until 9 --resume --start-step 9"
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "failed", "stopped")
        assert final["status"] == "succeeded", final
        assert (final["lastCheckpoint"] or {}).get("step") == 9, final
    finally:
        await _stop_any(client)
        await stop_server(client)


async def _stop_any(client: ArenaClient) -> None:
    """Kill a run left running by a failed assertion (on main: the trainer started anew)."""
    status = await client.call("arena/status", {})
    if status["active"] is not None:
        await client.call("arena/stop", {"kill": True, "confirm": True})
