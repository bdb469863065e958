"""AR013 edited-during-run: the information diagnostic on a trainer whose run is live.

Python read the trainer once, at launch: while its run goes on, edits to
the file change nothing in the run, and take effect at the next launch. The
diagnostic sits at the top of the file while the run is live (shown on
open and on every change), and goes when the run ends (``insights.py``
re-publishes the open trainers when the set of live trainers changes).
"""

from __future__ import annotations

from pathlib import Path

from arena_ls.diagnostics import Diag, Span
from arena_ls.insights.service import InsightService

CODE = "AR013"
NAME = "edited-during-run"


def live_run_diagnostics(insights: InsightService, path: Path) -> list[Diag]:
    """AR013 for ``path`` when a live run's trainer is that file, else nothing."""
    view = insights.live_run_of(path)
    if view is None:
        return []
    message = (
        f"{NAME}: run {view.run_id} of job `{view.spec.job_id}` is live and uses the version of "
        "this file read at its launch; edits take effect at the next launch"
    )
    return [Diag(code=CODE, message=message, severity="information", span=Span(0, 0, 1, 0), path=str(path))]
