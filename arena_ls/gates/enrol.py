""" "Add this trainer to the manifest" and ``arena init``: a ``train`` job for a script (contract 8.1).

The job's ``resume.args`` are what its framework needs to resume:

- Hugging Face (``Trainer.train``) with a ``--resume_from_checkpoint`` option
  (``HfArgumentParser(TrainingArguments)``, an argparse option, a ``fire``
  parameter): ``["--resume_from_checkpoint", "{path}"]``;
- Lightning: ``LightningCLI`` gets ``["--ckpt_path", "{path}"]`` (and ``fit`` as
  its first argument); ``trainer.fit(ckpt_path=args.X)`` gets the option that
  sets ``X`` (``--ckpt_path``, ``--resume``, whatever the script calls it);
- anything else (a plain loop, the kit's ``resume_step()``):
  ``["--resume", "--start-step", "{step}"]``.

The job is added to the manifest's text as an insertion that keeps every
other byte of the file (its comments-free JSON, its indentation, its line
ends); a missing manifest is written whole. A manifest that is not a JSON
object with a ``jobs`` list is never touched: the caller says why.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import PurePosixPath
from typing import Any

from arena_ls.gates.engine import parse_context
from arena_ls.gates.options import CliOptions
from arena_ls.trainer_facts.context import TrainerContext

PLAIN_RESUME = ["--resume", "--start-step", "{step}"]
_ID_CHARS = re.compile(r"[^a-z0-9._-]+")


class ManifestUnusable(ValueError):
    """The manifest cannot take a new job without rewriting what is there (the message says why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Insertion:
    """Replace ``text[start:end]`` with ``new_text`` (character offsets)."""

    start: int
    end: int
    new_text: str

    def apply(self, text: str) -> str:
        return text[: self.start] + self.new_text + text[self.end :]


def job_for(
    script: str, source: str | bytes, taken: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The ``train`` job that runs ``script`` (a path relative to the workspace, ``/``-separated)."""
    ctx = parse_context(source)
    resume = resume_args(ctx) if ctx is not None else list(PLAIN_RESUME)
    args = [script]
    if ctx is not None and _uses_lightning_cli(ctx):
        args.append("fit")
    stem = PurePosixPath(script).stem
    return {
        "id": unique_id(stem, taken),
        "name": stem,
        "kind": "train",
        "command": "{python}",
        "args": args,
        "script": script,
        "cwd": ".",
        "status": "ready",
        "resume": {"args": resume},
        "stop": {"method": "both", "graceSeconds": 120},
        "restart": {"maxRestarts": 3, "backoffSeconds": 5},
    }


def resume_args(ctx: TrainerContext) -> list[str]:
    framework = ctx.training.framework
    if framework is None and not ctx.kit.sites("resume_step") and ctx.path_resume_option is not None:
        return [ctx.path_resume_option, "{path}"]  # it loads the checkpoint that option names
    if framework is None or ctx.kit.sites("resume_step"):
        return list(PLAIN_RESUME)
    options = CliOptions(ctx)
    if framework.kind == "hf":
        if "resume_from_checkpoint" in options.names:
            return ["--resume_from_checkpoint", "{path}"]
        return list(PLAIN_RESUME)
    if framework.cli:
        return ["--ckpt_path", "{path}"]
    given = _option_feeding(ctx, framework.resume_argument())
    if given is not None:
        return given
    if "ckpt_path" in options.names:
        return ["--ckpt_path", "{path}"]
    return list(PLAIN_RESUME)


def _option_feeding(ctx: TrainerContext, value: ast.expr | None) -> list[str] | None:
    """The option ``value`` reads: ``[--ckpt, {path}]`` for ``args.ckpt``; ``[--resume]`` alone for
    ``"last" if args.resume else None`` (a switch: Lightning resumes from its last checkpoint)."""
    if value is None:
        return None
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute):
            option = ctx.resolver.options.get(node.attr)
            if option is not None:
                flag = next((flag for flag in option.flags if flag.startswith("--")), option.flags[0])
                return [flag] if option.action in ("store_true", "store_false") else [flag, "{path}"]
    return None


def _uses_lightning_cli(ctx: TrainerContext) -> bool:
    framework = ctx.training.framework
    return framework is not None and framework.cli


def unique_id(stem: str, taken: set[str] | frozenset[str]) -> str:
    """A job id from the script's name, ``[a-z0-9][a-z0-9._-]{0,63}``, not one of ``taken``."""
    base = _ID_CHARS.sub("-", stem.lower()).strip("-._") or "train"
    base = base[:56]
    candidate, number = base, 2
    while candidate in taken:
        candidate = f"{base}-{number}"
        number += 1
    return candidate


# the manifest's text ------------------------------------------------------------------


def listed_as(text: str, script: str) -> str | None:
    """The id of a job of the manifest that already runs ``script``, else None."""
    for job in _jobs(text):
        if not isinstance(job, dict):
            continue
        args = job.get("args")
        listed = args if isinstance(args, list) else []
        first = next((a for a in listed if isinstance(a, str) and a.endswith(".py")), None)
        if script in (job.get("script"), first):
            return str(job.get("id"))
    return None


def job_ids(text: str) -> set[str]:
    return {str(job.get("id")) for job in _jobs(text) if isinstance(job, dict)}


def _jobs(text: str) -> list[Any]:
    try:
        document = json.loads(text)
    except ValueError:
        return []
    jobs = document.get("jobs") if isinstance(document, dict) else None
    return jobs if isinstance(jobs, list) else []


def new_manifest(job: dict[str, Any]) -> str:
    """A whole manifest holding one job, in the layout of the project's own."""
    return f'{{\n  "version": 1,\n  "jobs": [\n    {_block(job, "    ", chr(10))}\n  ]\n}}\n'


def add_job(text: str, job: dict[str, Any]) -> Insertion:
    """The insertion that adds ``job`` at the end of the manifest's ``jobs`` list.

    Raises :class:`ManifestUnusable` when the text is not a JSON object whose
    ``jobs`` (if there) is a list.
    """
    import json_source_map  # start-up speed: only an edit of the manifest needs it

    try:
        document = json.loads(text)
        positions = json_source_map.calculate(text)
    except (ValueError, TypeError) as error:
        raise ManifestUnusable(f"the manifest is not valid JSON ({error}); fix it first") from None
    if not isinstance(document, dict):
        raise ManifestUnusable("the manifest is not a JSON object")
    newline = "\r\n" if "\r\n" in text else "\n"
    jobs = document.get("jobs")
    if jobs is None:
        return _with_jobs_key(text, document, positions, job, newline)
    if not isinstance(jobs, list):
        raise ManifestUnusable("the manifest's `jobs` is not a list")
    where = positions["/jobs"]
    if jobs:
        last = positions[f"/jobs/{len(jobs) - 1}"]
        indent = " " * last.value_start.column
        block = _block(job, indent, newline)
        return Insertion(last.value_end.position, last.value_end.position, f",{newline}{indent}{block}")
    outer = " " * _line_indent(
        text, where.key_start.position if where.key_start else where.value_start.position
    )
    indent = outer + "  "
    block = _block(job, indent, newline)
    return Insertion(
        where.value_start.position,
        where.value_end.position,
        f"[{newline}{indent}{block}{newline}{outer}]",
    )


def _with_jobs_key(
    text: str, document: dict[str, Any], positions: dict[str, Any], job: dict[str, Any], newline: str
) -> Insertion:
    root = positions[""]
    close = root.value_end.position - 1  # the object's closing brace
    if not document:
        block = _block(job, "    ", newline)
        return Insertion(
            root.value_start.position,
            root.value_end.position,
            f'{{{newline}  "jobs": [{newline}    {block}{newline}  ]{newline}}}',
        )
    last_key = list(document)[-1]
    last = positions["/" + last_key.replace("~", "~0").replace("/", "~1")]
    indent = " " * (last.key_start.column if last.key_start else 2)
    block = _block(job, indent + "  ", newline)
    addition = f',{newline}{indent}"jobs": [{newline}{indent}  {block}{newline}{indent}]'
    assert text[close] == "}"
    return Insertion(last.value_end.position, last.value_end.position, addition)


def _block(job: dict[str, Any], indent: str, newline: str) -> str:
    """The job as JSON, one field a line, whose first line starts where the caller puts it."""
    fields = [f"{indent}  {json.dumps(key)}: {json.dumps(value)}" for key, value in job.items()]
    return newline.join(["{", f",{newline}".join(fields), f"{indent}}}"])


def _line_indent(text: str, position: int) -> int:
    start = text.rfind("\n", 0, position) + 1
    line = text[start:position]
    return len(line) - len(line.lstrip(" \t"))


def lsp_position(text: str, offset: int) -> tuple[int, int]:
    """(line, UTF-16 column) of a character offset, as LSP counts them."""
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    column = len(text[start:offset].encode("utf-16-le")) // 2
    return line, column
