"""``python -m benchmarks``: run every benchmark, print medians and spreads, write a JSON file.

    python -m benchmarks                 # the full suite (under 10 minutes on 2 cores)
    python -m benchmarks --quick         # small sizes, one repeat (under a minute, for CI)
    python -m benchmarks --only capture,stop
    python -m benchmarks --product /path/to/other/checkout   # measure another arena-ls
    python -m benchmarks --show benchmarks/results-quick.json   # the targets of a results file

Targets are printed as met or MISSED; nothing here asserts on time, and the
exit status is 0 unless a benchmark itself failed (an error, not a slow
figure). ``--product`` puts another checkout's ``arena_ls`` first on the
``PYTHONPATH`` of every server and agent this run starts, to compare a
proposed change with the current code on the same machine.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.harness import Section

BENCHMARKS: dict[str, str] = {
    "capture": "benchmarks.bench_capture",
    "latency": "benchmarks.bench_latency",
    "responsiveness": "benchmarks.bench_responsive",
    "memory": "benchmarks.bench_memory",
    "idle": "benchmarks.bench_idle",
    "stop": "benchmarks.bench_stop",
    "startup": "benchmarks.bench_startup",
    "lint": "benchmarks.bench_lint_section",
    "scale": "benchmarks.bench_scale",
    "cluster": "benchmarks.bench_cluster",
    "resume": "benchmarks.bench_resume",
    "hostile_gates": "benchmarks.bench_hostile_gates",
    "first_status": "benchmarks.bench_first_status",
    "capped_log": "benchmarks.bench_capped_log",
}
"""Benchmark name -> module with ``run(quick, repeats=None) -> list[Section]``.

``capture`` also yields the ``ingest`` and ``notify`` sections (same floods);
``latency`` yields ``editor_latency`` and ``server_latency``; ``scale`` yields ``scale``,
``history`` and ``checkpoints``.
"""

OPT_IN = frozenset({"cluster", "resume", "hostile_gates", "first_status"})
"""Run only when named with ``--only``: the cluster benchmark starts a Ray head (``arena-ls[ray]``);
the resume benchmark kills and restarts the torch reference trainer (about a minute per kill under
load, and torch from the test extras); the hostile-gates one takes half a minute and more (issue 39)."""

DEFAULT_OUTPUT = harness.BENCH_DIR / "results.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat, for CI (< 60 s)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--repeats", type=int, default=None, help="override every benchmark's repeat count")
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"JSON results file (default {DEFAULT_OUTPUT.relative_to(harness.REPO)}, "
        "or results-quick.json with --quick)",
    )
    parser.add_argument(
        "--product",
        type=Path,
        default=None,
        help="a checkout whose arena_ls the servers and agents should run",
    )
    parser.add_argument(
        "--show",
        type=Path,
        default=None,
        help="print the targets table of a results file written before, and run nothing",
    )
    args = parser.parse_args(argv)
    chosen = [n.strip() for n in args.only.split(",") if n.strip()]
    names = chosen or [n for n in BENCHMARKS if n not in OPT_IN]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    args.names = names
    return args


def use_product(path: Path | None) -> str:
    """Point every child process at ``path``'s arena_ls; describe what is measured."""
    if path is not None:
        path = path.resolve()
        if not (path / "arena_ls" / "__init__.py").exists():
            raise SystemExit(f"--product {path}: no arena_ls package there")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")]))
    source = path or harness.REPO
    return f"{source} ({_git_describe(source)})"


def _git_describe(path: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return f"commit {head}{' with uncommitted changes' if dirty else ''}"


def run_one(name: str, quick: bool, repeats: int | None) -> list[Section]:
    """Run one benchmark; a failure becomes a section carrying the error."""
    print(f"\n### benchmark {name} ...", flush=True)
    started = time.perf_counter()
    try:
        module = importlib.import_module(BENCHMARKS[name])
        runner: Callable[..., list[Section]] = module.run
        sections = runner(quick=quick, repeats=repeats)
    except Exception as error:  # one broken benchmark must not hide the others' figures
        traceback.print_exc()
        sections = [Section(name, "failed", error=f"{type(error).__name__}: {error}")]
    elapsed = time.perf_counter() - started
    for section in sections:
        section.seconds = elapsed if section is sections[0] else 0.0
        section.print()
    return sections


def summary_rows(sections: list[Section]) -> list[dict[str, Any]]:
    """Every figure that has a target: the table the docs show."""
    rows = []
    for section in sections:
        for figure in section.figures.values():
            if figure.target is not None:
                rows.append(
                    {
                        "benchmark": section.name,
                        "figure": figure.name,
                        "median": figure.to_json()["median"],
                        "min": figure.to_json()["min"],
                        "max": figure.to_json()["max"],
                        "unit": figure.unit,
                        "target": figure.target,
                        "meets": figure.meets,
                    }
                )
    return rows


def print_summary(rows: list[dict[str, Any]], failed: list[str]) -> None:
    print("\n=== targets (median [min .. max]) ===")
    for row in rows:
        verdict = "met" if row["meets"] else "MISSED"
        print(
            f"{row['benchmark'] + '.' + row['figure']:<52} {row['median']!s:>12} {row['unit']:<6}"
            f" [{row['min']} .. {row['max']}]  {row['target']:<12} {verdict}"
        )
    if failed:
        print(f"\nFAILED benchmarks: {', '.join(failed)}")


def show(path: Path) -> int:
    """Print a results file's targets (``scripts/test.sh`` shows those of the quick run that
    ``tests/benchmarks/test_quick_bench.py`` made, instead of running the benchmarks twice)."""
    results = json.loads(path.read_text())
    print(f"{results['command']} on {results['date']}, {results['seconds']} s, product {results['product']}")
    print_summary(results["targets"], results["failed"])
    return 1 if results["failed"] else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.show is not None:
        return show(args.show)
    product = use_product(args.product)
    output = args.output or harness.BENCH_DIR / ("results-quick.json" if args.quick else "results.json")
    started = time.perf_counter()
    info = harness.machine()
    print(f"arena-ls benchmarks ({'quick' if args.quick else 'full'}): {', '.join(args.names)}")
    print(f"product: {product}")
    print(
        f"machine: {info['nproc']} CPUs, {info['ram_gb']} GiB, {info['cpu_model']}, "
        f"load {info['load_average']}"
    )
    sections: list[Section] = []
    for name in args.names:
        sections.extend(run_one(name, args.quick, args.repeats))
    failed = [s.name for s in sections if s.error]
    rows = summary_rows(sections)
    print_summary(rows, failed)
    results = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m benchmarks"
        + (" --quick" if args.quick else "")
        + (f" --only {args.only}" if args.only else ""),
        "quick": args.quick,
        "product": product,
        "machine": info,
        "load_average_after": harness.machine()["load_average"],
        "seconds": round(time.perf_counter() - started, 1),
        "sections": {s.name: s.to_json() for s in sections},
        "targets": rows,
        "failed": failed,
    }
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {output} in {results['seconds']} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
