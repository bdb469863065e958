"""What a cluster run submits: the entrypoint, its environment and resources, the working_dir package.

Ray runs an entrypoint through ``/bin/sh -c``: the argv is quoted with
``shlex.join`` and prefixed with ``exec``, so the trainer *is* the
entrypoint process and Ray's stop (SIGTERM) reaches it at once.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import shlex
import stat
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arena_ls.agent.resume_args import resume_env
from arena_ls.run.rundir import RunSpec

MAX_PACKAGE_BYTES = 512 * 1024 * 1024
"""Ray's default limit on a ``working_dir`` package (``GCS_STORAGE_MAX_SIZE``: its gRPC message limit)."""
PACKAGE_LIMIT_VARIABLE = "RAY_max_grpc_message_size"
"""The variable Ray's own client reads its package limit from (as here): a cluster configured
with a smaller gRPC message limit is matched by setting it for the server too."""
EXCLUDED_DIRS = frozenset({".aide", ".git", "checkpoints", "__pycache__", ".venv", "venv", "node_modules"})
"""Folders never shipped: state, history, checkpoints (they live on the cluster's storage), caches."""
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
"""Every entry gets this time: the same tree makes the same package (and Ray reuses it)."""
STOP_WAIT_VARIABLE = "RAY_JOB_STOP_WAIT_TIME_S"
UTF8_OUTPUT = {"PYTHONIOENCODING": "utf-8", "PYTHONUTF8": "1"}


class PackageTooLarge(ValueError):
    """The job's folder, without the excluded parts, is larger than Ray accepts."""


def entrypoint(argv: Sequence[str]) -> str:
    """``exec`` + the quoted argv: run by ``/bin/sh -c`` on the cluster, never re-split wrongly."""
    return "exec " + shlex.join(argv)


def stop_wait_seconds(grace_seconds: float) -> int:
    """``RAY_JOB_STOP_WAIT_TIME_S`` (a whole number, at least 1) for the job's ``graceSeconds``."""
    return max(1, math.ceil(grace_seconds))


def env_vars(spec: RunSpec) -> dict[str, str]:
    """The trainer's environment on the cluster: UTF-8 output, the job's env, the contract's variables.

    No ``ARENA_STOP_FILE``: a cluster has no stop file (AR111); a stop is a signal."""
    env: dict[str, str] = {}
    if not any(name in spec.env for name in UTF8_OUTPUT):
        env.update(UTF8_OUTPUT)
    env.update(spec.env)
    env.update(
        {
            "ARENA_RUN_ID": spec.run_id,
            "ARENA_JOB_ID": spec.job_id,
            "PYTHONUNBUFFERED": "1",
            STOP_WAIT_VARIABLE: str(stop_wait_seconds(spec.grace_seconds)),
        }
    )
    return env


def entrypoint_resources(resources: Mapping[str, float]) -> dict[str, Any]:
    """The manifest's ``resources`` as Ray's entrypoint reservation fields."""
    fields: dict[str, Any] = {}
    if "gpus" in resources:
        fields["entrypoint_num_gpus"] = resources["gpus"]
    if "cpus" in resources:
        fields["entrypoint_num_cpus"] = resources["cpus"]
    if "memoryMb" in resources:
        fields["entrypoint_memory"] = int(resources["memoryMb"] * 1024 * 1024)
    return fields


def submit_payload(spec: RunSpec, argv: Sequence[str], submission_id: str, package: str) -> dict[str, Any]:
    """The body of ``POST /api/jobs/``."""
    assert spec.cluster is not None
    return {
        "entrypoint": entrypoint(argv),
        "submission_id": submission_id,
        "runtime_env": {"working_dir": package, "env_vars": env_vars(spec) | resume_env(argv, spec.argv)},
        "metadata": {"arena.runId": spec.run_id, "arena.jobId": spec.job_id},
        **entrypoint_resources(spec.cluster.resources),
    }


def submission_id(run_id: str, attempt: int) -> str:
    """A new id per submission (Ray never reuses one): the run's id and the attempt's number."""
    return f"arena-{run_id}-{attempt}"


# -- the working_dir package ------------------------------------------------------------------


def excluded(relative: Path, is_dir: bool, skip: frozenset[Path] = frozenset()) -> bool:
    """Whether a path of the job's folder stays out of the package."""
    if relative in skip:
        return True
    if is_dir and relative.name in EXCLUDED_DIRS:
        return True
    return is_dir and relative.name.startswith("venv")


def package_files(root: Path, skip: Sequence[Path] = ()) -> list[tuple[str, Path]]:
    """``(name in the zip, path)`` of every file shipped, sorted; virtual environments
    (a folder holding ``pyvenv.cfg``) and ``skip`` (the state folder, relative to
    ``root``) are left out with the ``EXCLUDED_DIRS``."""
    skipped = frozenset(Path(p) for p in skip)
    files: list[tuple[str, Path]] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        relative_here = here.relative_to(root)
        dirs[:] = sorted(
            d
            for d in dirs
            if not excluded(relative_here / d, True, skipped) and not (here / d / "pyvenv.cfg").exists()
        )
        for name in sorted(names):
            path = here / name
            relative = relative_here / name
            if relative in skipped:
                continue
            try:
                mode = path.stat().st_mode
            except OSError:
                continue  # a dangling link: nothing to ship
            if stat.S_ISREG(mode):
                files.append((relative.as_posix(), path))
    return files


def package_limit(environ: Mapping[str, str] = os.environ) -> int:
    """Ray's package limit: ``RAY_max_grpc_message_size`` when set (as Ray reads it), else 512 MiB."""
    try:
        return int(environ.get(PACKAGE_LIMIT_VARIABLE, MAX_PACKAGE_BYTES))
    except ValueError:
        return MAX_PACKAGE_BYTES


def _size_text(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB" if size >= 1024 * 1024 else f"{size} bytes"


def build_package(root: Path, skip: Sequence[Path] = (), limit: int | None = None) -> tuple[str, bytes]:
    """``(gcs URI, zip bytes)`` of the job's folder; ``PackageTooLarge`` at or above ``limit``
    (Ray refuses a package of exactly its limit too); ``limit`` defaults to ``package_limit()``.

    The size is checked as files are added, before anything is sent."""
    limit = package_limit() if limit is None else limit
    buffer = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for name, path in package_files(root, skip):
            total += path.stat().st_size
            if total >= limit:
                raise PackageTooLarge(
                    f"the job's folder is over {_size_text(limit)} (Ray's limit for a working_dir) "
                    f"even without {', '.join(sorted(EXCLUDED_DIRS))}: at {name}"
                )
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.external_attr = (path.stat().st_mode & 0o777 | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    if len(data) >= limit:
        raise PackageTooLarge(f"the job's package is {len(data)} bytes, over Ray's limit of {limit}")
    digest = hashlib.sha256(data).hexdigest()[:32]
    return f"gcs://_ray_pkg_{digest}.zip", data
