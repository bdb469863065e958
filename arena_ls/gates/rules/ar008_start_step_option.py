'''AR008 start-step-option: the trainer has no `--start-step` option.

What it checks
--------------
That the trainer accepts `--start-step` (`--start_step`; `--resume-step`
also counts), declared with argparse, click/typer, or as a dataclass field.
The finding is reported at the `ArgumentParser(...)` call. Its quick fix
adds `parser.add_argument("--start-step", type=int, default=0, ...)` after
the last `add_argument` call.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
On a relaunch the watchdog passes the step of the last checkpoint it saw
(`--start-step {step}`), so the trainer can pick the matching checkpoint and
skip the data it has already seen. Without it a resumed run repeats or
mislabels steps, and on a slow GPU repeated steps are hours.

Example that fires
------------------
```python
parser = argparse.ArgumentParser()
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()
```

Write instead
-------------
```python
parser = argparse.ArgumentParser()
parser.add_argument("--resume", action="store_true")
parser.add_argument("--start-step", type=int, default=0)
args = parser.parse_args()
```
'''

from __future__ import annotations

from collections.abc import Iterator

from arena_ls.gates.context import TrainerContext
from arena_ls.gates.options import CliOptions
from arena_ls.gates.rules.base import Rule, Violation, parse_doc

CODE = "AR008"
NAME = "start-step-option"
MESSAGE = "no --start-step option"
FIX_TITLE = "Add a --start-step option"
ARGUMENTS = '"--start-step", type=int, default=0, help="step of the checkpoint to resume from"'


def check(ctx: TrainerContext) -> Iterator[Violation]:
    options = CliOptions(ctx)
    if options.has_start_step():
        return
    insertion = options.insertion()
    edits = (insertion.edit(ARGUMENTS),) if insertion is not None else ()
    yield Violation(span=options.anchor(),
                    message=MESSAGE + ": a relaunch cannot tell the trainer which step it "
                    "resumes from", edits=edits)


RULE = Rule(code=CODE, name=NAME, message=MESSAGE, severity="error", fix_title=FIX_TITLE,
            doc=parse_doc(__doc__), check=check)
