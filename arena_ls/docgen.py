"""The command line of a generated document: write it, or ``--check`` that it is current.

``docs/rules.md`` (``python -m arena_ls.gates.docs``) and ``docs/insights.md``
(``python -m arena_ls.insights.docs``) are generated from their rules; CI
runs each with ``--check`` so that a rule changed without its page fails.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def generated_doc_main(
    argv: list[str] | None, *, module: str, description: str, render: Callable[[], str], default: Path
) -> int:
    """Write ``render()`` to ``--output`` (``default``); with ``--check``, exit 1 when it differs."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the file differs from what would be generated"
    )
    parser.add_argument("--output", type=Path, default=default, help=f"the page (default: {default})")
    args = parser.parse_args(argv)
    text = render()
    output: Path = args.output
    if args.check:
        current = output.read_text(encoding="utf-8") if output.exists() else ""
        if current != text:
            print(f"{output} is stale: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {output}", file=sys.stderr)
    return 0
