"""The seed's manifest shapes (contract 7.3): a resumable trainer written as a task, and ``stages``.

The seed's own entry is ``{"id": "pretrain", "command": "py", "args": ["-3.10",
"-E", "E:\\\\train\\\\train.py", "--resume", "--start-step", "<step>"]}``: no
``kind``, so it would load as a ``task`` (no gates, no pre-flight, no
watchdog, a literal ``<step>`` in argv). :func:`resume_shaped` says when an
entry looks like that (``AR114``); :func:`as_train_job` is its quick fix.
The seed's older manifest also lists ``stages`` (ids with no command);
:func:`stage_entries` reads them so they can be listed, blocked, as jobs.

Pure functions of the parsed JSON: the loader reports and positions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

SEED_STEP = "<step>"
"""The seed's step placeholder; in ``resume.args`` it means ``{step}``."""
STEP = "{step}"
RESUME_FLAGS = ("--resume", "--start-step")
VALUE_FLAGS = ("--start-step",)
"""Resume flags that take the next argument as their value."""


def resume_shaped(args: Sequence[str]) -> bool:
    """True when ``args`` name a ``.py`` script and ``--resume``, ``--start-step`` or ``<step>``."""
    names_script = any(arg.lower().endswith(".py") for arg in args)
    return names_script and any(_is_resume_arg(arg) for arg in args)


def _is_resume_arg(arg: str) -> bool:
    return SEED_STEP in arg or any(arg == flag or arg.startswith(flag + "=") for flag in RESUME_FLAGS)


def split_resume_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(plain args, resume args)``: the resume flags (with ``--start-step``'s value) moved out.

    ``<step>`` becomes ``{step}``; resume arguments with no step get
    ``--start-step {step}`` so the relaunch knows where to start.
    """
    plain: list[str] = []
    resume: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in VALUE_FLAGS and index + 1 < len(args):
            resume.extend([arg, args[index + 1]])
            index += 2
            continue
        (resume if _is_resume_arg(arg) else plain).append(arg)
        index += 1
    resume = [seed_step_to_step(arg) for arg in resume]
    if not any(STEP in arg for arg in resume):
        resume = [arg for arg in resume if arg != "--start-step"] + ["--start-step", STEP]
    return plain, resume


def seed_step_to_step(arg: str) -> str:
    """The seed's ``<step>`` written as the contract's ``{step}``."""
    return arg.replace(SEED_STEP, STEP)


def as_train_job(raw: dict[str, Any]) -> dict[str, Any]:
    """The job object AR114's quick fix writes: ``kind: train``, the resume arguments in ``resume.args``."""
    args = [str(arg) for arg in raw.get("args") or []]
    plain, resume = split_resume_args(args)
    fixed: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "kind":
            continue
        fixed[key] = value
        if key == "id":
            fixed["kind"] = "train"
    fixed.setdefault("kind", "train")
    fixed["args"] = plain
    old_resume = raw.get("resume")
    fixed["resume"] = {**(old_resume if isinstance(old_resume, dict) else {}), "args": resume}
    return fixed


def job_text(job: dict[str, Any], indent: str) -> str:
    """``job`` as JSON at ``indent`` (the column its object starts at), one field a line."""
    fields = [
        f"{indent}  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}" for key, value in job.items()
    ]
    return "{\n" + ",\n".join(fields) + "\n" + indent + "}"


def stage_entries(raw: Any) -> list[tuple[str, str, str]]:
    """``(id, name, pointer suffix)`` of each stage: a list (of ids or objects) or an object by id."""
    entries: list[tuple[str, str, str]] = []
    if isinstance(raw, list):
        for index, item in enumerate(raw):
            stage_id, name = _stage_identity(item)
            if stage_id:
                entries.append((stage_id, name or stage_id, str(index)))
    elif isinstance(raw, dict):
        for key, item in raw.items():
            _, name = _stage_identity(item)
            entries.append((str(key), name or str(key), _escape(str(key))))
    return entries


def _stage_identity(item: Any) -> tuple[str | None, str | None]:
    if isinstance(item, str):
        return item, None
    if isinstance(item, dict):
        stage_id = item.get("id")
        name = item.get("name")
        return (stage_id if isinstance(stage_id, str) else None, name if isinstance(name, str) else None)
    return None, None


def stage_job(stage_id: str, name: str) -> dict[str, Any]:
    """The job AR115's quick fix adds for a stage: a gated, resumable trainer that needs approval."""
    return {
        "id": stage_id,
        "name": name,
        "kind": "train",
        "command": "{python}",
        "script": "train.py",
        "resume": {"args": ["--resume", "--start-step", STEP]},
        "status": "approval-required",
    }


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
