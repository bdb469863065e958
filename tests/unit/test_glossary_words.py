"""One word per concept (docs/architecture.md, "Glossary"): the words that meant two things once.

"follower" is the server's one loop over its runs' files (``lifecycle/follower.py``), never the
process that owns a run (its *agent*); the trainer's announcements and the agent's records are
two modules with names of their own, not ``events`` beside ``supervisor_events``.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "arena_ls"
SERVER_SIDE = ("lifecycle", "protocol", "services")
"""The packages of the server, where the follower lives; the agents' and the run folder's code
runs in other processes and has no follower to speak of."""
AGENT_MEANINGS = re.compile(
    r"(?<![a-z])(new|dead|earlier|cluster|revived|its|whose|run's|our|this)[ _]follower(?![a-z])"
    r"|(?<![a-z])follower[ _](process|pid)(?![a-z])",  # [ _]: in a sentence and in a test's name
    re.IGNORECASE,
)
"""Phrases that name a run's agent: a follower is one per server, never one per run."""
WORD = re.compile(r"\bfollowers?\b", re.IGNORECASE)


def python_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def where(path: Path, pattern: re.Pattern[str]) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [f"{path.relative_to(REPO)}:{n}" for n, line in enumerate(lines, 1) if pattern.search(line)]


def test_only_the_server_side_speaks_of_a_follower() -> None:
    outside = [
        hit
        for path in python_files(PACKAGE)
        if path.relative_to(PACKAGE).parts[0] not in SERVER_SIDE
        for hit in where(path, WORD)
    ]
    assert outside == [], "the process that owns a run is its agent"


def test_no_text_calls_a_runs_agent_its_follower() -> None:
    texts = [*python_files(PACKAGE), *python_files(REPO / "tests"), *sorted((REPO / "docs").glob("*.md"))]
    found = [hit for path in texts if path.name != Path(__file__).name for hit in where(path, AGENT_MEANINGS)]
    assert found == []


def test_the_checkers_find_what_they_look_for() -> None:
    assert AGENT_MEANINGS.search("started a new follower (pid 4)")
    assert AGENT_MEANINGS.search("the run's follower process")
    assert AGENT_MEANINGS.search("def test_a_revived_cluster_follower_counts(")  # a test's name, too
    assert not AGENT_MEANINGS.search("the follower's next round")
    assert WORD.search("Followers of a run") and not WORD.search("the following lines")


def test_announcements_and_records_have_modules_of_their_own() -> None:
    run = PACKAGE / "run"
    assert not (run / "events.py").exists() and not (run / "supervisor_events.py").exists()
    assert (run / "trainer_announcements.py").is_file() and (run / "agent_records.py").is_file()
    old_names = re.compile(r"\bSupervisorEvent\b|supervisor_events|\brun import events\b|\brun\.events\b")
    assert [hit for path in python_files(PACKAGE) for hit in where(path, old_names)] == []
