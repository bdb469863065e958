"""AR007 resume-option: the trainer has no `--resume` option.

What it checks
--------------
That the trainer accepts `--resume` (or an option starting with `--resume`,
such as `--resume-from`), declared with argparse, click/typer, or as a field
of a dataclass parsed by `HfArgumentParser`/`tyro`/`simple_parsing`. The
finding is reported at the `ArgumentParser(...)` call. Its quick fix adds
`parser.add_argument("--resume", action="store_true", ...)` after the last
`add_argument` call.

The kit and the frameworks: a call of `arena_trainer.resume_step()` keeps
this rule (it reads the relaunch's `--resume --start-step N`). A framework
that resumes from a path counts when the path comes from the command line:
Hugging Face's `trainer.train(resume_from_checkpoint=X)` or Lightning's
`trainer.fit(..., ckpt_path=X)` with X an option (not a constant, not
a value set to None in the file), and `LightningCLI` (its `--ckpt_path`).

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
The job's watchdog relaunches a crashed run with the manifest's
`resume.args` (by default `--resume --start-step {step}`). A trainer that
cannot take them starts again from step 0 after every crash, and a crash on
a 6 GB card is a matter of when, not if.

Example that fires
------------------
```python
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=3e-4)
parser.add_argument("--start-step", type=int, default=0)
args = parser.parse_args()
```

Write instead
-------------
```python
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=3e-4)
parser.add_argument("--start-step", type=int, default=0)
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()
```
"""

from __future__ import annotations

from collections.abc import Iterator

from arena_ls.gates.adopt import framework_resume_violation
from arena_ls.gates.options import CliOptions
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext

CODE = "AR007"
NAME = "resume-option"
MESSAGE = "no --resume option"
FIX_TITLE = "Add a --resume option"
ARGUMENTS = '"--resume", action="store_true", help="resume from the latest checkpoint"'


def check(ctx: TrainerContext) -> Iterator[Violation]:
    if ctx.kit.sites("resume_step") or ctx.resumes_from_option:
        return
    if ctx.training.framework is not None:
        yield framework_resume_violation(ctx, MESSAGE)
        return
    options = CliOptions(ctx)
    if options.has_resume():
        return
    yield options.missing(
        MESSAGE + ": the watchdog cannot restart this trainer from a checkpoint" + _hint(ctx), ARGUMENTS
    )


def _hint(ctx: TrainerContext) -> str:
    framework = ctx.training.framework
    if framework is None:
        return " (or call arena_trainer.resume_step())"
    if framework.kind == "lightning":
        return "; give fit(ckpt_path=...) an option such as --ckpt_path"
    return "; give train(resume_from_checkpoint=...) an option such as --resume_from_checkpoint"


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check, fix_title=FIX_TITLE)
