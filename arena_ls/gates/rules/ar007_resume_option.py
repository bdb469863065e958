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
this rule (it reads the relaunch's `--resume --start-step N`), and so does a
plain loop's `arena_trainer.resume_path()` (it reads `--resume-path {path}`).
A framework that resumes from a path counts when the path comes from the
command line: Hugging Face's `trainer.train(resume_from_checkpoint=X)` or
Lightning's `trainer.fit(..., ckpt_path=X)` with X an option or the kit's
`resume_path()` (not a constant, not a value set to None in the file), and
`LightningCLI` run as a command (its `fit --ckpt_path`).

Quick fixes on a framework trainer: "Resume from --resume_from_checkpoint"
(Hugging Face: `train()` gets the option its parser already has); "Resume
from --ckpt_path" (Lightning with argparse: the option, and `fit()` gets it);
and, where no option can be added, "Resume from the trainer kit's
--resume-path": `LightningCLI(..., run=False)` then `cli.trainer.fit(...)`
has no `--ckpt_path`, so the fix puts `ckpt_path = resume_path()` (imported
from the kit) before the first statement that reads the command line (the
kit takes its option off `sys.argv`, so `LightningCLI` does not refuse it)
and hands `fit(..., ckpt_path=ckpt_path)`; the job's `resume.args` are then
`["--resume-path", "{path}"]`. It is offered only where every command-line
parse of the file is in `fit`'s own function.

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

from arena_ls.gates.kit_resume import resume_violation
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
    if ctx.training.framework is None and ctx.kit.sites("resume_path"):
        return  # a {path} resume: the trainer loads the checkpoint the relaunch names
    if ctx.training.framework is not None:
        yield resume_violation(ctx, MESSAGE)
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
        return "; give fit(ckpt_path=...) an option such as --ckpt_path, or arena_trainer.resume_path()"
    return "; give train(resume_from_checkpoint=...) an option such as --resume_from_checkpoint"


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check, fix_title=FIX_TITLE)
