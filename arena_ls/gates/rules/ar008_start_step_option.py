"""AR008 start-step-option: the trainer has no `--start-step` option.

What it checks
--------------
That the trainer accepts `--start-step` (`--start_step`; `--resume-step`
also counts), declared with argparse, click/typer, or as a dataclass field,
and that it uses the value: an argparse `--start-step` whose `args.start_step`
is never read (nor `getattr(args, "start_step")`, nor the whole namespace
through `vars(args)`) fires too, at the `add_argument` call (not for
framework trainers, which resume from the checkpoint itself). A missing option
is reported at the `ArgumentParser(...)` call; its quick fix adds
`parser.add_argument("--start-step", type=int, default=0, ...)` after the
last `add_argument` call.

The kit and the frameworks: a call of `arena_trainer.resume_step()` keeps
this rule (an argparse parser that does not declare `--start-step` accepts a
relaunch all the same: the kit takes the relaunch's own arguments from its
leftovers, and stops a script that would then start over), and so does a
trainer that loads the checkpoint an option names
(`accelerator.load_state(args.resume_from)`, `torch.load(args.ckpt)`, timm's
`resume_checkpoint(model, args.resume, optimizer)`): its
relaunch passes `["--resume_from", "{path}"]`; a plain loop's
`arena_trainer.resume_path()` likewise (`["--resume-path", "{path}"]`). A
Hugging Face or Lightning trainer that resumes from a path the
command line gives (see AR007) needs no step: its relaunch passes the
announced checkpoint's `{path}` (`resume.args`
`["--resume_from_checkpoint", "{path}"]`, `--ckpt_path {path}`, or the kit's
`--resume-path {path}` for `fit(ckpt_path=arena_trainer.resume_path())`) and
the framework reads the step from the checkpoint. The quick fixes are AR007's.

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
step = args.start_step
```
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from arena_ls.gates.kit_resume import resume_violation
from arena_ls.gates.options import CliOptions
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext, mentions_in_code

CODE = "AR008"
NAME = "start-step-option"
MESSAGE = "no --start-step option"
FIX_TITLE = "Add a --start-step option"
ARGUMENTS = '"--start-step", type=int, default=0, help="step of the checkpoint to resume from"'


def check(ctx: TrainerContext) -> Iterator[Violation]:
    options = CliOptions(ctx)
    if ctx.kit.sites("resume_step"):
        return  # arena_trainer.resume_step() reads the step the relaunch passes
    if ctx.resumes_from_option:
        return  # a {path} resume: the framework reads the step from the checkpoint itself
    if ctx.training.framework is None and ctx.path_resume_option is not None:
        return  # the trainer loads the checkpoint an option names: a {path} resume
    if ctx.training.framework is None and ctx.kit.sites("resume_path"):
        return  # the trainer loads the checkpoint the kit's --resume-path names
    if ctx.training.framework is not None:
        yield resume_violation(ctx, MESSAGE)
        return
    if options.has_start_step():
        declared = options.start_step_declaration()
        if declared is not None and ctx.training.framework is None and not _value_used(ctx, *declared):
            call, dest = declared
            yield Violation(
                span=ctx.span(call),
                message=f"--start-step is parsed but `{dest}` is never used: a "
                "relaunch with --start-step N would start from the beginning",
            )
        return
    yield options.missing(
        MESSAGE + ": a relaunch cannot tell the trainer which step it resumes from", ARGUMENTS
    )


def _value_used(ctx: TrainerContext, declaration: ast.Call, dest: str) -> bool:
    """Whether the parsed value is read: ``args.dest``, ``dest``, ``"dest"``, ``vars(args)``.

    Read from the text outside the declaration (not in comments or
    docstrings), which needs no walk over the tree.
    """
    pattern = re.compile(rf"\b{re.escape(dest)}\b|\bvars\s*\(|\.__dict__\b")
    declared = range(declaration.lineno, (declaration.end_lineno or declaration.lineno) + 1)
    literals = (dest.lower(), "vars", "__dict__")
    return mentions_in_code(ctx.source, ctx.facts, pattern, literals, declared)


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check, fix_title=FIX_TITLE)
