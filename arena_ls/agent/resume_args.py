"""The resume arguments of a relaunch: ``resume.args`` with ``{step}`` and ``{path}`` filled in.

Contract 8.1: ``resume.args`` may name the checkpoint's path, as the trainer
announced it, beside its step: a Hugging Face trainer resumes with
``["--resume_from_checkpoint", "{path}"]``, a Lightning one with
``["--ckpt_path", "{path}"]``. ``{step}`` (and the seed's ``<step>``, which
means the same, contract 7.3) is the step of that checkpoint.

One pure function (``fill``) decides the arguments, from the step a relaunch
resumes at and the checkpoints known for it; nothing here reads a file.
Standard library only: the agent's entry point imports it before attrs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Protocol

from arena_ls.agent.interpreter import with_stream_flags

STEP_PLACEHOLDER = "{step}"
SEED_STEP_PLACEHOLDER = "<step>"
PATH_PLACEHOLDER = "{path}"
SKIP_PLACEHOLDER = "{skip}"
"""The batches a loss-spike rollback skips (contract 8.2); 0 on any other resume."""


class ResumePathUnknown(ValueError):
    """``resume.args`` name ``{path}`` and no announced checkpoint at the step has a path.

    Never guessed: a trainer given a literal ``{path}``, or none, could start
    from step 0 over the work it saved. The run is not started (or relaunched).
    """

    def __init__(self, step: int) -> None:
        super().__init__(
            f"resume.args name {PATH_PLACEHOLDER}, and no checkpoint announced at step {step} has a path: "
            "not resuming (start it with the checkpoint's step the job recorded, or fresh)"
        )
        self.step = step


class Announced(Protocol):
    """A checkpoint as recorded (``CheckpointRecord``, or the launcher's plain reading of one)."""

    @property
    def step(self) -> int: ...

    @property
    def path(self) -> str: ...


def uses_path(resume_args: Sequence[str]) -> bool:
    """Whether ``resume.args`` name the checkpoint's path."""
    return any(PATH_PLACEHOLDER in arg for arg in resume_args)


def names_checkpoint(arg: str) -> bool:
    """Whether one argument names the checkpoint (its step or its path): AR106 asks for one."""
    return STEP_PLACEHOLDER in arg or SEED_STEP_PLACEHOLDER in arg or PATH_PLACEHOLDER in arg


def path_at(step: int, known: Iterable[Announced | None]) -> str | None:
    """The announced path of the checkpoint at ``step`` among ``known`` (the first that matches)."""
    for checkpoint in known:
        if checkpoint is not None and checkpoint.step == step and checkpoint.path:
            return checkpoint.path
    return None


def fill(resume_args: Sequence[str], step: int, path: str | None, skip: int = 0) -> list[str]:
    """``resume.args`` for a resume at ``step`` from the checkpoint at ``path``, skipping ``skip``
    batches (``{skip}``: a loss-spike rollback's, 0 otherwise).

    Raises ``ResumePathUnknown`` when the arguments name ``{path}`` and it is None.
    """
    if path is None and uses_path(resume_args):
        raise ResumePathUnknown(step)
    return [_filled(arg, step, path, skip) for arg in resume_args]


def _filled(arg: str, step: int, path: str | None, skip: int) -> str:
    text = arg.replace(STEP_PLACEHOLDER, str(step)).replace(SEED_STEP_PLACEHOLDER, str(step))
    text = text.replace(SKIP_PLACEHOLDER, str(skip))
    return text.replace(PATH_PLACEHOLDER, path) if path is not None else text


RESUME_ARGS_VARIABLE = "ARENA_RESUME_ARGS"
"""The trainer kit's name for it (``arena_trainer.RESUME_ARGS_VARIABLE``): the resume arguments a
launch appended, so that the kit lets a parser that does not declare them accept them
(docs/trainer-guide.md, "A parser of your own")."""


def resume_env(argv: Sequence[str], job_argv: Sequence[str]) -> dict[str, str]:
    """``ARENA_RESUME_ARGS``: the JSON list of what ``trainer_argv`` appended to the job's argv
    (the filled ``resume.args``); empty for a launch that does not resume."""
    base = with_stream_flags(job_argv)
    appended = list(argv[len(base) :]) if list(argv[: len(base)]) == list(base) else []
    return {RESUME_ARGS_VARIABLE: json.dumps(appended)} if appended else {}
