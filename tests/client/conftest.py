"""Fixtures of the client's tests: a workspace of fake-trainer jobs, cleaned up after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.client.support import stop_every_run
from tests.helpers.lsp import job, make_workspace


def jobs() -> list[dict[str, Any]]:
    return [
        job("quick", "--steps", "15", "--ckpt-every", "5", "--numbered"),
        job("slow", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", "--numbered"),
        job(
            "deaf",
            "--steps",
            "100000",
            "--interval",
            "0.05",
            "--ignore-stop",
            stop={"method": "file", "graceSeconds": 600},
        ),
        job("needs-ok", "--steps", "3", status="approval-required"),
        job("off", "--steps", "3", status="disabled"),
        job("train-slow", "--steps", "100000", "--interval", "0.05", kind="train"),
        job("ckpt-train", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", kind="train"),
        job("exit3", "--steps", "2", "--exit-code", "3"),
    ]


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    root = make_workspace(tmp_path / "ws", jobs())
    try:
        yield root
    finally:
        stop_every_run(root)
