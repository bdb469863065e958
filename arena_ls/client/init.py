"""``arena init [SCRIPT]``: bring a trainer under arena-ls from a terminal (contract 8.1).

What the editors' source action "Add this trainer to the manifest" does, with
no server: ``training/manifest.json`` is created when there is none (empty,
or holding SCRIPT's job), and SCRIPT's ``train`` job, with the resume
arguments its framework needs, is added to an existing one as an insertion
that keeps every other byte. A manifest is never overwritten: it is written
to a temporary file and renamed over the old one only once the new text is
known to parse, and one that is not a JSON object with a ``jobs`` list is
left as it is (exit 1, saying why). A script the manifest already runs
changes nothing (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from arena_ls.client.errors import EXIT_FAILED, EXIT_USAGE
from arena_ls.client.visible_controls import visible

MANIFEST = Path("training") / "manifest.json"
EMPTY_MANIFEST = '{\n  "version": 1,\n  "jobs": []\n}\n'


def run_init(args: argparse.Namespace, root: Path, *, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    manifest = root / MANIFEST
    script: str | None = args.script
    if script is None:
        if manifest.exists():
            out.write(f"{MANIFEST.as_posix()} is already there; nothing changed\n")
            return 0
        _write(manifest, EMPTY_MANIFEST)
        out.write(f"created {MANIFEST.as_posix()} (no jobs yet: `arena init SCRIPT` adds a trainer)\n")
        return 0
    return _add_script(Path(script), root, manifest, out)


def _add_script(script: Path, root: Path, manifest: Path, out: TextIO) -> int:
    from arena_ls.gates import enrol  # the gates read the script's framework

    path = script if script.is_absolute() else Path.cwd() / script
    if path.suffix != ".py" or not path.is_file():
        return _fail(f"{script} is not a Python file", EXIT_USAGE)
    try:
        relative = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return _fail(f"{script} is outside the workspace {root}", EXIT_USAGE)
    try:
        source = path.read_bytes()
        text = manifest.read_bytes().decode("utf-8-sig") if manifest.exists() else None
    except (OSError, UnicodeDecodeError) as error:
        return _fail(f"cannot read {error}", EXIT_FAILED)
    if text is None:
        job = enrol.job_for(relative, source)
        new_text = enrol.new_manifest(job)
        created = True
    else:
        already = enrol.listed_as(text, relative)
        if already is not None:
            out.write(f"{MANIFEST.as_posix()} already runs {relative} (job {already}); nothing changed\n")
            return 0
        job = enrol.job_for(relative, source, enrol.job_ids(text))
        try:
            new_text = enrol.add_job(text, job).apply(text)
        except enrol.ManifestUnusable as error:
            return _fail(f"{MANIFEST.as_posix()} was left as it is: {error}", EXIT_FAILED)
        created = False
    json.loads(new_text)  # never write what does not parse
    _write(manifest, new_text)
    resume = " ".join(job["resume"]["args"])
    verb = "created" if created else "added to"
    out.write(f"{verb} {MANIFEST.as_posix()}: job `{job['id']}` runs {relative}, resumed with `{resume}`\n")
    if b"arena_trainer" in source and not (path.parent / "arena_trainer.py").exists():
        out.write(
            "it imports arena_trainer: put the kit beside it (the editor's quick fix "
            '"Add the trainer kit beside this script") unless arena-ls is installed in its interpreter\n'
        )
    return 0


def _write(manifest: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename it over the manifest."""
    from arena_ls.platform import replace_file

    manifest.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=manifest.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        replace_file(temporary, manifest)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _fail(message: str, code: int) -> int:
    print(f"arena init: {visible(message)}", file=sys.stderr, flush=True)
    return code
