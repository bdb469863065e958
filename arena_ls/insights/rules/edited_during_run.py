"""edited-during-run: the trainer file changed while its run goes on; the run does not see it.

What it watches
---------------
The modification time of the job's trainer file (its `script`) against the
start of the run's current launch. It holds while the file is newer than the
launch, and clears at the next launch (a watchdog relaunch reads the file
anew) or when the run ends. The editor shows the same fact as the
information diagnostic AR013 at the top of the file.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Python reads the script once, at launch. "Fixing" a live run by editing the
script changes nothing in it; worse, a crash relaunch picks the edit up in
the middle of the run, with a half-tested change and the old checkpoint.

What to do
----------
Leave the live run alone, or stop it (it checkpoints) and start it again to
use the edit; try the edit first with `arena probe JOB`.
"""

from __future__ import annotations

from arena_ls.insights.model import Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "edited-during-run"


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    modified, launched = obs.trainer_modified_at, obs.launched_at
    if modified is None or launched is None or modified <= launched:
        return None
    return (
        "the trainer was edited after this run started: the run uses the version read at launch; "
        "the edit takes effect at the next launch"
    )


RULE = InsightRule(kind=KIND, severity="info", doc=parse_doc(__doc__), check=check)
