"""The job agent's late imports and its pumps' (``arena_ls/run/late_imports.py``).

Issue 38's CI: a pump's first drop of a capped log imported ``logkeep`` (attrs) while the agent
loaded itself (attrs, cattrs) on another thread; CPython handed the pump a partially initialized
``attr._make``, the pump died, the trainer blocked on its full pipe and was stopped as stalled.
Both now import under one lock. Each process below races the two for real, from a barrier: the
agent's loading (``launch._load_agent``, as a spare agent runs it) against a flood through a
capped writer (what a pump calls). Without the lock, 28 of 40 such processes failed here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RACES = 8

RACE = """
import sys, threading
from pathlib import Path
from arena_ls.agent import launch
from arena_ls.run.logsegments import MIN_SEGMENT_BYTES, load_table
from arena_ls.run.outputlog import STDOUT, OutputWriter

def flood(lines):
    for number in range(lines):
        writer.append(STDOUT, b"line %d " % number + b"x" * 200 + b"\\n")

writer = OutputWriter(Path(sys.argv[1]), max_bytes=64 * 1024, segment_floor=MIN_SEGMENT_BYTES)
# Past the cap first, with the filters' module unloadable (its drops wait): so the race's first
# append is the one whose drop imports them, as the pump's first drop does.
sys.modules["arena_ls.run.logkeep"] = None
flood(1000)
del sys.modules["arena_ls.run.logkeep"]
assert "attr" not in sys.modules, "attrs is imported before the race: it races nothing"
writer.keep_error = None
start = threading.Barrier(2)
failures = []

def pump():
    start.wait()
    try:
        flood(1000)
    except BaseException as error:
        failures.append(f"the pump's append raised {error!r}")

def agent():
    start.wait()
    try:
        launch._load_agent()
    except BaseException as error:
        failures.append(f"the agent's loading raised {error!r}")

threads = [threading.Thread(target=pump), threading.Thread(target=agent)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
writer.close()
if writer.keep_error is not None:
    failures.append(f"a drop could not load what it keeps: {writer.keep_error!r}")
table = load_table(Path(sys.argv[1]))
if table is None or table.dropped_lines == 0:
    failures.append("the log was never trimmed")
print("; ".join(failures) or "ok")
"""


def test_a_pumps_first_drop_and_the_agents_loading_import_one_at_a_time(tmp_path: Path) -> None:
    for race in range(RACES):
        folder = tmp_path / f"run-{race}"
        folder.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", RACE, str(folder)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0 and done.stdout.strip() == "ok", (race, done.stdout, done.stderr[-2000:])
