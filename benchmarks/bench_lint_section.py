"""The ``lint`` benchmark: ``benchmarks/bench_lint.py`` (written separately), wrapped as a section.

``bench_lint.run`` measures ``lint_trainer`` on a generated 10,000-line
trainer against ``ast.parse`` of it and returns medians of its own repeats;
it is called several times here so that its ratio has a spread too. It also
reports the start-up of ``arena check`` on an empty file (``check_empty_ms``,
target under 100 ms) next to a bare interpreter start. Each
call runs in a fresh interpreter: in this process, which has imported
pygls and lsprotocol and holds every earlier result, the garbage collector
runs over a far larger heap during ``ast.parse``, and the baseline would be
several times slower than in a linter's own process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from benchmarks.harness import REPO, Section

FIGURES = {
    "lint_ms": "ms",
    "ast_parse_ms": "ms",
    "ast_parse_no_gc_ms": "ms",
    "analysis_ms": "ms",
    "ratio_vs_parse_no_gc": "x",
    "cpu_ratio": "x",
    "check_empty_cpu_ms": "ms",
    "python_startup_ms": "ms",
}


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 3)
    section = Section("lint", "lint_trainer on a generated trainer over ast.parse of it (bench_lint.py)")
    for _ in range(repeats):
        figures = _run_in_fresh_interpreter(quick)
        section.figure("lint/ast_parse", "x", "<= 3").add(float(figures["ratio"]))
        if "check_empty_ms" in figures:  # `arena check` on an empty file: its start-up
            section.figure("check_empty_ms", "ms", "< 100").add(float(figures["check_empty_ms"]))
        for key, unit in FIGURES.items():
            if key in figures:
                section.figure(key, unit).add(float(figures[key]))
        section.facts.update({k: figures[k] for k in ("lines", "repeats", "findings") if k in figures})
    section.facts["calls"] = repeats
    return [section]


def _run_in_fresh_interpreter(quick: bool) -> dict[str, Any]:
    code = (
        f"import json; from benchmarks import bench_lint; print(json.dumps(bench_lint.run(quick={quick!r})))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=600
    )
    figures: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return figures
